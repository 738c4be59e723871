"""llmgw's shared core: planning, placement, launch and the fleet.

Nothing here imports Textual; the console (`llmgw_tui`) and the headless
runner (`llmgw_core.script`) are two faces over the same decisions.
"""

import warnings

__version__ = "0.1.0"

# asyncssh names DSA's key types when it is imported, and cryptography 51 warns at each
# name: ten lines of a library's deprecation on the stderr of every console and script,
# which the operator can do nothing about (and which the one sentence of a bad input
# drowned in). Only those warnings, only from asyncssh.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")

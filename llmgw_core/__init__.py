"""llmgw's shared core: planning, placement, launch and the fleet.

Nothing here imports Textual; the console (`llmgw_tui`) and the headless
runner (`llmgw_core.script`) are two faces over the same decisions.
"""

__version__ = "0.1.0"

"""The llmgw node agent: facts, doctor and supervision, standard library only.

Runs on Python 3.8+ with nothing but the standard library (and `pynvml` when
it happens to be installed). It never imports `llmgw_core`.
"""

__version__ = "0.1.0"
PROTOCOL_VERSION = 1
RUNS_FROM = "source"
"""Where this process imported the agent from, as the hello says: `cache` (the
folder unpacked beside the zipapp), `zip`, or `source`; the zipapp's
`__main__` (zip_main.py) sets it."""

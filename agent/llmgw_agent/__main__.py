"""`llmgw` on a node, and `python3 -m llmgw_agent` / the zipapp.

Subcommands:
  serve       speak the JSON-lines protocol on stdin/stdout (the console's channel)
  doctor      check this node; `--facts --json` prints its facts
  supervise   (internal) the small process that owns one detached shard
  sim-engine  (internal) the simulated inference engine used by the demo and tests
  front       (internal) a gateway's network port: client keys, routing to its workers
  hold        (internal) a Slurm job's step on one node: one agent per console's relay
"""

from __future__ import annotations

import sys

USAGE = "usage: llmgw {serve,doctor,supervise,sim-engine,front,hold} [options]"


def main(argv=None):
    """Dispatch to a subcommand; imports stay lazy so each starts fast."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        print(__doc__.split("\n", 2)[2].rstrip())
        return 0 if args else 2
    command, rest = args[0], args[1:]
    import os

    from llmgw_agent.paths import PRIVATE_UMASK

    # Shared nodes: nothing the agent writes (records, logs, its engines'
    # files) is readable by the node's other users.
    os.umask(PRIVATE_UMASK)
    if command == "serve":
        from llmgw_agent.protocol import serve_main

        return serve_main(rest)
    if command == "doctor":
        from llmgw_agent.doctor.command import main as doctor_main

        return doctor_main(rest)
    if command == "supervise":
        from llmgw_agent.shards.supervise import supervise_main

        return supervise_main(rest)
    if command == "sim-engine":
        from llmgw_agent.sim.engine.server import main as sim_engine_main

        return sim_engine_main(rest)
    if command == "front":
        from llmgw_agent.front.server import main as front_main

        return front_main(rest)
    if command == "hold":
        from llmgw_agent.slurm_hold import hold_main

        return hold_main(rest)
    sys.stderr.write("llmgw: unknown command {!r}; {}\n".format(command, USAGE))
    return 2


if __name__ == "__main__":
    sys.exit(main())

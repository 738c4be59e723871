"""Fabric tests and NCCL: is each rail and each replica on the fabric it should be.

`perftest` and `nccl` parse the tools' output (ib_write_bw, all_reduce_perf,
NCCL's own log lines); `verdicts` judges a rail against its rate and a
replica's transport; `run` drives a test across the agents. The parsers and
verdicts are pure; only `run` does I/O, through `fleet`.

Never imports the planner, `placement`, `serve` or the script runner.
"""

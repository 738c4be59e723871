"""Slurm as a scheduler of our replicas: what its commands print, read into typed values.

`nodes` reads the node list (`scontrol show node --json`, `sinfo --json`, `scontrol -o -d
show node`), `jobs` a job's state and reason (`scontrol -o -d show job`, `squeue --json`,
`sbatch --parsable`), `hostlist` expands `node[1-3,5]`, `gres` reads GRES and TRES strings,
`version` reads `scontrol --version`. Each reader takes the text a command printed and
returns frozen pydantic models, or raises `SlurmOutputUnreadable` (a `BadInput`, exit 2)
with one sentence; none of them runs a command.

Pure: imports only `llmgw_core.errors`, pydantic and the standard library.
"""

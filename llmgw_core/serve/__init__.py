"""Serving: a plan turned into running replicas, watched, healed and stopped.

Decides which way to try (`choice`), what each node launches (`launch`,
`prepare`), where the weights come from (`weights`, `fetch`), whether the
fabric carries the first all-reduce (`preflight`), and drives claim → start
→ ready (`serve`) over the agents; `replicas` and `view` reassemble what runs
from the nodes' shards, `heal` places a broken replica again, `http` and
`session` reach an engine through SSH tunnels, `transport`, `progress` and
`explain` say what happened.

Imports the planner, `placement`, `engines`, `fleet` and `fabric`; never the
script runner or the console.
"""

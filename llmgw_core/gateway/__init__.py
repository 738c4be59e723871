"""The gateway: one OpenAI-compatible address in front of every ready replica.

A gateway is `vllm-router` run as a shard of its own kind on a node the
operator names; its workers are the replicas' rank-0 engines, grouped by the
model they serve. `spec` decides (command line, workers wanted, changes to
make, gateways read back from the nodes) without I/O; `run` starts, adopts,
follows and stops gateways over the agents and SSH tunnels.

Sits above `serve` (it reads replicas) and below `script`; never imports Textual.
"""

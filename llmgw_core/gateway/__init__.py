"""The gateway: one OpenAI-compatible address in front of every ready replica.

A gateway is the agent's front (`llmgw front`) run as a shard of its own kind
on a node the operator names: it checks client keys and routes each request
to one of the replicas' rank-0 engines serving its model. `spec` decides
(command line, workers wanted, changes to make, gateways read back from the
nodes) without I/O; `run` starts, adopts, follows and stops gateways over the
agents.

Sits above `serve` (it reads replicas) and below `script`; never imports Textual.
"""

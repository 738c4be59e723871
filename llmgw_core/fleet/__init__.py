"""The fleet: SSH to the nodes, the agent on each, and snapshots of what they say.

The ways in, for the faces and the steps:

* `session.open_fleet(inventory=..., demo=...)` → `(Fleet, close)`: connect
  every node of an inventory (or of the demo fleet) and wait until each has
  answered or failed once;
* `Fleet.snapshot()` → `FleetState` (immutable: node → `NodeState` with its
  state, reason, last_seen and validated facts), `Fleet.add_listener(...)`,
  `Fleet.wait_for(predicate)`, `Fleet.refresh(name)`;
* `Fleet.request(name, op, args)` / `Fleet.client(name).stream(op, args)`:
  the agent protocol of one node;
* `accept.accept_host_main(node, inventory=...)`: `--accept-host NODE`.

Modules: `ssh` (connections, host keys, bastions), `deploy` (the agent
zipapp and its upload), `client` (the protocol over one channel), `fleet`
(keeping every node up), `state` (snapshots), `checks` (inventory against
facts), `loopback` (an SSH server on 127.0.0.1 running real commands),
`demo` (the simulated fleet built from it).
"""

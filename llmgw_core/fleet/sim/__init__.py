"""The demo and simulated fleets, apart from the SSH transport: nodes written from captures, pools of agents."""

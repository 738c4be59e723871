"""Services: what should run, declared once, and `apply` making the fleet run it.

`spec` reads the document and decides the actions (pure); `lease` keeps two
operators from changing one service at once (a lease in the agents' state);
`apply` carries the actions out — starts, rolls without a dropped request,
stops — and stops a whole service.

Imports `serve` and `gateway`; never the script runner or the console.
"""

"""What the console and the headless listings show, computed once (pure).

`fleet` summarises nodes, cards, racks and adapters; `serve` turns a replica
into table rows. The console draws these and computes nothing of its own, so
the headless runner prints the same figures.

Reads facts and replica views; never opens a connection, never imports the
script runner or the console.
"""

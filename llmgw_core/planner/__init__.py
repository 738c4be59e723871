"""The planner: which ways a model can run on which cards, ranked (pure).

Decides the widths a model allows (`ways`), whether each way fits a card by
the engines' memory rules (`fit`), and ranks ways × artifacts × pools
(`plan`), finding each pool's ways in `pool_ways`, each a `Way` of
`way_record`. Its view of a fleet is `pools` — built from a described fleet or,
by `pools_live`, from live facts and claims — with `gpu_classes` as the one
name for a card.

Imports `model` and `memory` (and the engines' pure command preview); never
`placement`, `serve`, `script`, or anything that opens a connection.
"""

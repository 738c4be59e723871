"""Fabric tests run from this node: one half of ib_write_bw, the pair, replays, all_reduce_perf, and the verdicts kept."""

"""Shards: their records and specs, their logs, the supervisor that owns each, and the claims on cards."""

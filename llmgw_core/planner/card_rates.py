"""What a whole card can do per second, as its maker rates it: the ratio advisor's only source.

Dense BF16 tensor throughput (without the 2:4 sparsity figure the data sheets
print beside it), HBM bandwidth, and NVLink bandwidth per card (both directions
together), from NVIDIA's data sheets: H100 SXM5 and H200 (Hopper, 2023–24),
B200 and the GB200/GB300 NVL72 racks (Blackwell, per GPU, 2024–25), A100 SXM4,
L40S, L4, T4. A card sold in more than one form is taken in the form its class
label names (`h100-80g`: the SXM5 board llmgw's NVLink rules assume).

These are what the card is rated at, not what an engine reaches; the advisor
says which share of them it assumes (`planner.pd_ratio`), and a MIG instance or
an unlisted card gets no advice rather than a guess.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CardRate:
    """One card's rated throughput.

    Attributes:
        bf16_tflops: dense BF16 tensor throughput, 10¹² FLOP/s.
        hbm_tbps: memory bandwidth, 10¹² bytes/s.
        nvlink_gbps: NVLink bandwidth per card, both directions, 10⁹ bits/s; 0 without NVLink.
    """

    bf16_tflops: float
    hbm_tbps: float
    nvlink_gbps: float


RATES: dict[str, CardRate] = {
    "h100-80g": CardRate(989.0, 3.35, 7200.0),
    "h200-141g": CardRate(989.0, 4.8, 7200.0),
    "b200-180g": CardRate(2250.0, 8.0, 14400.0),
    "gb200-186g": CardRate(2500.0, 8.0, 14400.0),
    "gb300-288g": CardRate(2500.0, 8.0, 14400.0),
    "a100-80g": CardRate(312.0, 2.039, 4800.0),
    "a100-40g": CardRate(312.0, 1.555, 4800.0),
    "l40s-48g": CardRate(362.0, 0.864, 0.0),
    "l4-24g": CardRate(121.0, 0.3, 0.0),
    "t4-16g": CardRate(65.0, 0.32, 0.0),
}
"""Rated figures by class label (whole cards only)."""


def card_rate(label: str) -> CardRate | None:
    """The rated figures of a class, None for a MIG instance or a card not listed."""
    return RATES.get(label)

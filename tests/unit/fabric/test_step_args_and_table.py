"""The `fabric-test` step's arguments and its table, without a fleet."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from rich.console import Console

from llmgw_core.script.steps.fabric import FabricTestArgs, render_fabric_test


def test_two_nodes_or_a_fabric_must_be_named() -> None:
    with pytest.raises(ValidationError, match=r"give two nodes \(nodes: \[A, B\]\) or a fabric"):
        FabricTestArgs(nodes=["h100-a-01"])
    assert FabricTestArgs(fabric="ib-a").max_pairs == 4
    assert FabricTestArgs(nodes=["a", "b"]).duration_s == 5.0


def test_a_node_listed_twice_is_refused() -> None:
    with pytest.raises(ValidationError, match="a node is listed twice"):
        FabricTestArgs(nodes=["a", "a"])


def test_an_unknown_argument_is_refused() -> None:
    with pytest.raises(ValidationError):
        FabricTestArgs(nodes=["a", "b"], rails=2)


def row(**values: object) -> dict[str, object]:
    base = {
        "node_a": "h100-a-01",
        "node_b": "h100-a-02",
        "adapter_a": "mlx5_5",
        "adapter_b": "mlx5_5",
        "rated_gbps": 400.0,
        "measured_gbps": 240.0,
        "ratio": 0.6,
        "verdict": "fail",
        "method": "ib_write_bw",
        "reason": "240.0 of 400 Gb/s (60%)",
    }
    return {**base, **values}


def test_the_table_fits_80_columns_and_puts_reasons_beneath_it() -> None:
    result = {
        "fabric": "ib-a",
        "rails": [
            row(),
            row(
                adapter_a="mlx5_6",
                adapter_b="mlx5_6",
                measured_gbps=None,
                ratio=None,
                reason="down: mlx5_6 on h100-a-02 is DOWN",
            ),
            row(
                node_b="cpu-01",
                adapter_a=None,
                adapter_b=None,
                rated_gbps=None,
                measured_gbps=17.3,
                ratio=None,
                verdict="untested",
                method="tcp",
                reason="TCP over the management network, not the fabric: no shared fabric",
            ),
        ],
    }
    console = Console(width=80, record=True, color_system=None)
    console.print(render_fabric_test(result))
    lines = console.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    text = "\n".join(lines)
    assert "fabric test: ib-a" in text
    assert "mlx5_5" in text and "60%" in text and "ib_write_bw" in text
    assert "h100-a-01–h100-a-02 mlx5_6: down: mlx5_6 on h100-a-02 is DOWN" in text
    assert "h100-a-01–cpu-01: TCP over the management network" in text

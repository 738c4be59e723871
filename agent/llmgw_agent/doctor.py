"""`llmgw doctor`: check this node and say, check by check, what to fix.

    llmgw doctor [--replay DIR] [--model-dir PATH ...] [--json]
    llmgw doctor [--replay DIR] --facts --json      # the node's facts
    llmgw doctor --capture DIR                      # write a capture for a bug report

Each check is `{"check", "status": pass|warn|fail, "message", "fix"}`; the
exit status is 1 when any check fails, 2 when the arguments are wrong.
`run_checks` is pure (facts in, checks out), so the protocol's `doctor` op
and this command give the same answers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from llmgw_agent import paths

Check = Dict[str, str]


def _check(name: str, status: str, message: str, fix: str = "") -> Check:
    return {"check": name, "status": status, "message": message, "fix": fix}


def _driver_checks(facts: Dict[str, Any]) -> List[Check]:
    host = facts.get("host") or {}
    cards = facts.get("cards") or []
    errors = facts.get("errors") or []
    if host.get("cpu_only") and not cards:
        return [_check("driver", "pass", "CPU-only node: no NVIDIA driver expected")]
    if not cards:
        reason = "; ".join(errors) if errors else "no NVIDIA GPU was found"
        return [
            _check(
                "driver",
                "fail",
                "the NVIDIA driver is not reachable: {}".format(reason),
                "install the NVIDIA driver so that `nvidia-smi` runs, or set LLMGW_CPU_ONLY=1 "
                "on a node that has no GPU on purpose",
            )
        ]
    checks = [
        _check(
            "driver",
            "pass",
            "NVIDIA driver {}, CUDA {}".format(
                host.get("driver_version") or "?", host.get("cuda_version") or "?"
            ),
        )
    ]
    source = facts.get("source", "")
    if source == "nvidia-smi":
        checks.append(
            _check(
                "nvml",
                "warn",
                "NVML is not used (pynvml is not installed): facts come from nvidia-smi",
                "pip install nvidia-ml-py for faster, finer facts (optional)",
            )
        )
    elif source == "nvml":
        checks.append(_check("nvml", "pass", "NVML reachable"))
    return checks


def _card_checks(facts: Dict[str, Any]) -> List[Check]:
    cards = facts.get("cards") or []
    if not cards:
        return []
    classes: Dict[str, int] = {}
    for card in cards:
        classes[card["class"]] = classes.get(card["class"], 0) + 1
    summary = ", ".join("{} x {}".format(n, c) for c, n in sorted(classes.items()))
    on_bus = (facts.get("host") or {}).get("pci_gpus")
    if on_bus is not None and on_bus > len(cards):
        checks = [
            _check(
                "cards",
                "fail",
                "{} NVIDIA GPU(s) on the PCI bus but only {} visible to the driver: {}".format(
                    on_bus, len(cards), summary
                ),
                "look for `fallen off the bus` or Xid errors in `dmesg`; a reset "
                "(`nvidia-smi -r`) or a reboot usually brings the card back",
            )
        ]
    else:
        checks = [_check("cards", "pass", "{} card(s) visible: {}".format(len(cards), summary))]
    for card in cards:
        if card.get("memory_mib") is None:
            checks.append(
                _check(
                    "cards",
                    "warn",
                    "card {} ({}) reports no memory size".format(card["index"], card["name"]),
                    "run `nvidia-smi -q -d MEMORY -i {}`; a card that cannot report "
                    "memory may need a reset".format(card["index"]),
                )
            )
        pending = card.get("mig_pending")
        if pending and card.get("mig_mode") and pending != card["mig_mode"]:
            checks.append(
                _check(
                    "mig",
                    "warn",
                    "card {}: MIG mode is {} but {} is pending until the card is reset".format(
                        card["index"], card["mig_mode"], pending
                    ),
                    "reset the card when it is idle (`nvidia-smi -r -i {}`) or reboot".format(
                        card["index"]
                    ),
                )
            )
        if card.get("out_of_placement"):
            checks.append(
                _check(
                    "mig",
                    "warn",
                    "card {}: {}".format(card["index"], card["out_of_placement"]),
                    "carve instances (`nvidia-smi mig -i {} -cgi <profiles> -C`) or turn MIG off "
                    "(`nvidia-smi -i {} -mig 0`)".format(card["index"], card["index"]),
                )
            )
    return checks


def _nvlink_checks(facts: Dict[str, Any]) -> List[Check]:
    matrix = facts.get("nvlink") or {}
    cells = [(a, b, cell) for a, row in matrix.items() for b, cell in row.items()]
    links = [int(cell[2:]) for _, _, cell in cells if cell.startswith("NV") and cell[2:].isdigit()]
    if not links:
        if len(matrix) > 1:
            return [
                _check(
                    "nvlink",
                    "pass",
                    "no NVLink between the cards (PCIe only): tensor parallel stays on one card",
                )
            ]
        return []
    best = max(links)
    weak = [
        (a, b, cell)
        for a, b, cell in cells
        if int(a) < int(b)
        and not (cell.startswith("NV") and cell[2:].isdigit() and int(cell[2:]) == best)
    ]
    if not weak:
        return [_check("nvlink", "pass", "every card pair is linked by NV{}".format(best))]
    pairs = ", ".join("{}-{} {}".format(a, b, cell) for a, b, cell in weak[:6])
    return [
        _check(
            "nvlink",
            "fail",
            "NVLink is down or narrower between some cards (the others use NV{}): {}".format(
                best, pairs
            ),
            "check `nvidia-smi nvlink --status` and the fabric manager (`systemctl status "
            "nvidia-fabricmanager`); a reset of the affected cards usually brings links back",
        )
    ]


def _card_list(indices: List[int]) -> str:
    return (
        "card {}".format(indices[0])
        if len(indices) == 1
        else "cards {}".format(", ".join(str(i) for i in indices))
    )


def _fabric_checks(facts: Dict[str, Any]) -> List[Check]:
    groups: Dict[tuple, List[int]] = {}
    for card in facts.get("cards") or []:
        fabric = card.get("fabric")
        if not fabric or fabric.get("verdict") not in ("not-joined", "unhealthy", "degraded"):
            continue
        health = fabric.get("health") or {}
        key = (
            fabric["verdict"],
            fabric.get("state"),
            fabric.get("status") or "?",
            health.get("summary") or "?",
            health.get("bandwidth") or "?",
        )
        groups.setdefault(key, []).append(card["index"])
    checks = []
    for (verdict, state, status, summary, bandwidth), indices in sorted(groups.items()):
        where = _card_list(indices)
        if verdict == "not-joined":
            checks.append(
                _check(
                    "fabric",
                    "fail",
                    "{} not joined to the NVLink fabric (state {}, status {})".format(
                        where, state, status
                    ),
                    "check the NVLink switch trays and the fabric manager (NMX); "
                    "`nvidia-smi -q -d FABRIC` shows the reason",
                )
            )
        elif verdict == "unhealthy":
            checks.append(
                _check(
                    "fabric",
                    "fail",
                    "{} in the NVLink fabric but unhealthy (summary {}, bandwidth {})".format(
                        where, summary, bandwidth
                    ),
                    "look at `nvidia-smi -q -d FABRIC` health fields and the NVLink switch logs",
                )
            )
        else:
            checks.append(
                _check(
                    "fabric",
                    "warn",
                    "{} at reduced NVLink bandwidth (summary {}, bandwidth {})".format(
                        where, summary, bandwidth
                    ),
                    "replicas still run, slower; check the tray's NVLink cables and switch ports",
                )
            )
    if facts.get("cards") and not checks:
        domain = facts.get("nvlink_domain")
        if domain:
            checks.append(
                _check(
                    "fabric",
                    "pass",
                    "every card joined NVLink domain {} (clique {})".format(
                        domain["cluster_uuid"], domain.get("clique_id")
                    ),
                )
            )
        elif any(c.get("fabric") for c in facts["cards"]):
            checks.append(
                _check(
                    "fabric", "pass", "NVSwitch fabric up; not part of a multi-node NVLink domain"
                )
            )
    return checks


def _imex_checks(facts: Dict[str, Any]) -> List[Check]:
    if not facts.get("nvlink_domain"):
        return []
    imex = facts.get("imex")
    channels = facts.get("imex_channels") or []
    checks = []
    if imex is None:
        checks.append(
            _check(
                "imex",
                "fail",
                "this node is in an NVLink domain but the IMEX daemon is not installed",
                "install and start nvidia-imex (`systemctl enable --now nvidia-imex`) with the "
                "domain's node list",
            )
        )
    elif imex.get("state") != "UP":
        checks.append(
            _check(
                "imex",
                "fail",
                "the IMEX domain is {}{}".format(
                    imex.get("state") or "not answering",
                    ": " + imex["error"] if imex.get("error") else "",
                ),
                "`systemctl status nvidia-imex`; every node of the domain must list the same "
                "addresses in /etc/nvidia-imex/nodes_config.cfg",
            )
        )
    else:
        message = "IMEX domain UP with {} node(s)".format(len(imex.get("nodes") or []))
        if imex.get("connectivity_ok") is False:
            checks.append(
                _check(
                    "imex",
                    "warn",
                    message + ", but some nodes are not connected",
                    "run `nvidia-imex-ctl -N` and look for cells other than C",
                )
            )
        else:
            checks.append(_check("imex", "pass", message))
    if not channels:
        checks.append(
            _check(
                "imex",
                "fail",
                "no IMEX channel: /dev/nvidia-caps-imex-channels/channel0 is missing, so "
                "multi-node NVLink memory cannot be shared",
                "create it: `nvidia-modprobe -i 0:1` (or load nvidia with "
                "NVreg_CreateImexChannel0=1)",
            )
        )
    else:
        checks.append(_check("imex", "pass", "IMEX channel {} present".format(channels[0])))
    return checks


def _adapter_checks(facts: Dict[str, Any]) -> List[Check]:
    adapters = facts.get("adapters") or []
    if not adapters:
        if facts.get("cards"):
            return [
                _check(
                    "adapters",
                    "warn",
                    "no RDMA adapter (InfiniBand or RoCE): this node serves single-node replicas only",
                    "if it has adapters, load the RDMA drivers (mlx5_ib) so /sys/class/infiniband lists them",
                )
            ]
        return []
    checks = []
    healthy: Dict[tuple, List[str]] = {}
    for adapter in adapters:
        name = "{} port {}".format(adapter["name"], adapter["port"])
        kind = "RoCE" if adapter.get("link_layer") == "Ethernet" else "InfiniBand"
        if adapter.get("state") != "ACTIVE":
            checks.append(
                _check(
                    "adapters",
                    "fail",
                    "{} ({}) is {}".format(
                        name, kind, adapter.get("state") or "in an unknown state"
                    ),
                    "check the cable and the switch port; `ibstat {}`".format(adapter["name"]),
                )
            )
            continue
        rate, rated = adapter.get("rate_gbps"), adapter.get("rated_gbps")
        if rate is not None and rated and rate < rated:
            checks.append(
                _check(
                    "adapters",
                    "warn",
                    "{} ({}) links at {:.0f} Gb/s, below the {:.0f} Gb/s of its siblings".format(
                        name, kind, rate, rated
                    ),
                    "reseat or replace the cable or transceiver; a slow rail slows every all-reduce",
                )
            )
        else:
            healthy.setdefault((kind, rate), []).append(adapter["name"])
    for (kind, rate), names in sorted(healthy.items(), key=lambda item: item[1][0]):
        rate_words = "{:.0f} Gb/s".format(rate) if rate is not None else "an unreported rate"
        checks.append(
            _check(
                "adapters",
                "pass",
                "{} active: {} x {} at {}".format(", ".join(names), len(names), kind, rate_words),
            )
        )
    return checks


def _model_dir_checks(facts: Dict[str, Any]) -> List[Check]:
    checks = []
    for path, entry in sorted((facts.get("model_dirs") or {}).items()):
        state = entry.get("state")
        where = "{} ({}{})".format(
            path, entry.get("fs_type") or "?", ", shared" if entry.get("shared") else ""
        )
        if state == "missing":
            checks.append(
                _check(
                    "model_dirs",
                    "fail",
                    "{} does not exist".format(path),
                    "create it or fix model_dirs in the inventory",
                )
            )
        elif state == "unreadable":
            checks.append(
                _check(
                    "model_dirs",
                    "fail",
                    "{} cannot be read".format(path),
                    "give the SSH user read access (chmod/chgrp)",
                )
            )
        elif state == "partial":
            partial = [m["name"] for m in entry.get("models", []) if m.get("state") == "partial"]
            checks.append(
                _check(
                    "model_dirs",
                    "warn",
                    "{}: half-downloaded: {}".format(where, ", ".join(partial[:5])),
                    "finish or delete the download; a partial model is not used",
                )
            )
        else:
            count = len(entry.get("models") or [])
            checks.append(
                _check("model_dirs", "pass", "{}: {} complete model(s)".format(where, count))
            )
    return checks


def _router_checks(facts: Dict[str, Any]) -> List[Check]:
    """The gateway's router (vllm-router) and its version, where this node has one.

    Most nodes need none (a gateway runs on one node), so its absence is not a
    warning here; the `gateway` step names the install command when the node
    it was given lacks one.
    """
    router = (facts.get("engines") or {}).get("vllm-router")
    if not router:
        return []
    return [
        _check(
            "router",
            "pass",
            "vllm-router {} at {}".format(
                router.get("version") or "(version unknown)", router.get("path") or "?"
            ),
        )
    ]


def _engine_checks(facts: Dict[str, Any]) -> List[Check]:
    engines = {
        name: entry
        for name, entry in (facts.get("engines") or {}).items()
        if name not in ("vllm-router", "ray")
    }
    if not engines:
        return [
            _check(
                "engines",
                "fail",
                "no inference engine found (vLLM, SGLang, llama.cpp)",
                "install one: `pip install vllm` (GPU nodes) or build llama.cpp's llama-server; "
                "set LLMGW_ENGINE_PREFIXES to a virtualenv outside the usual places",
            )
        ]
    listed = ", ".join(
        "{} {}".format(name, (entry or {}).get("version") or "(version unknown)")
        for name, entry in sorted(engines.items())
    )
    return [_check("engines", "pass", listed)]


def _keepalive_checks(facts: Dict[str, Any]) -> List[Check]:
    keepalive = facts.get("keepalive")
    if not keepalive:
        return []
    if keepalive.get("method") is None:
        return [
            _check(
                "keepalive",
                "fail",
                "no way to keep a shard running after the SSH session ends",
                keepalive.get("reason") or "",
            )
        ]
    return [
        _check(
            "keepalive",
            "pass",
            "shards detach with {}: {}".format(keepalive["method"], keepalive.get("reason") or ""),
        )
    ]


def _state_checks(state_dir: Optional[Path]) -> List[Check]:
    if state_dir is None:
        return []
    probe = state_dir / ".doctor-probe"
    try:
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        return [
            _check(
                "state",
                "fail",
                "the agent's state dir {} is not writable: {}".format(state_dir, exc),
                "fix its permissions or set LLMGW_AGENT_STATE to a writable directory",
            )
        ]
    mode = state_dir.stat().st_mode & 0o777
    if mode & 0o077:
        return [
            _check(
                "state",
                "warn",
                "the agent's state dir {} is open to other users of this node ({:04o}): "
                "its shard records and engine logs can be read".format(state_dir, mode),
                "chmod 700 {} (the agent could not: is it another user's?)".format(state_dir),
            )
        ]
    note = paths.tightened(state_dir)
    if note is not None:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(note.get("at") or 0)))
        return [
            _check(
                "state",
                "warn",
                "the agent found its state dir {} open to other users ({}) and closed it "
                "(0700) at {}: what it held before may have been read".format(
                    state_dir, note.get("was"), when
                ),
                "rotate any key or token used on this node before then; "
                "remove {} to clear this".format(state_dir / paths.TIGHTENED_NOTE),
            )
        ]
    return [_check("state", "pass", "state dir {} (0700, this user's only)".format(state_dir))]


def run_checks(facts: Dict[str, Any], state_dir: Optional[Path] = None) -> List[Check]:
    """Every doctor check for a node's facts (and its state dir, when given)."""
    checks: List[Check] = []
    checks += _driver_checks(facts)
    checks += _card_checks(facts)
    checks += _nvlink_checks(facts)
    checks += _fabric_checks(facts)
    checks += _imex_checks(facts)
    checks += _adapter_checks(facts)
    checks += _model_dir_checks(facts)
    checks += _engine_checks(facts)
    checks += _router_checks(facts)
    checks += _keepalive_checks(facts)
    checks += _state_checks(Path(state_dir) if state_dir is not None else None)
    return checks


def format_checks(checks: List[Check]) -> str:
    """The checks as lines for a person: `FAIL  fabric   message`, the fix indented below."""
    width = max((len(c["check"]) for c in checks), default=6)
    lines = []
    for check in checks:
        lines.append(
            "{:<5} {:<{w}}  {}".format(
                check["status"].upper(), check["check"], check["message"], w=width
            )
        )
        if check["fix"] and check["status"] != "pass":
            lines.append("{:<5} {:<{w}}  fix: {}".format("", "", check["fix"], w=width))
    failed = sum(1 for c in checks if c["status"] == "fail")
    warned = sum(1 for c in checks if c["status"] == "warn")
    lines.append("{} check(s): {} failed, {} warning(s)".format(len(checks), failed, warned))
    return "\n".join(lines)


# ---- command line ------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmgw doctor", description="Check this node.")
    parser.add_argument(
        "--replay", metavar="DIR", help="read a capture directory instead of the hardware"
    )
    parser.add_argument(
        "--model-dir",
        action="append",
        default=[],
        metavar="PATH",
        help="a model directory to check (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--facts", action="store_true", help="print the node's facts instead of checks"
    )
    parser.add_argument(
        "--capture", metavar="DIR", help="write a capture directory for a bug report"
    )
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """`llmgw doctor ...`: 0 all checks pass or warn, 1 one failed, 2 bad arguments."""
    args = _parser().parse_args(argv)
    if args.capture:
        from llmgw_agent.discover.capture import capture

        written = capture(Path(args.capture))
        print("wrote {} to {}".format(", ".join(written["files"]) or "nothing", args.capture))
        for filename, problem in sorted(written["problems"].items()):
            print("  not captured: {}: {}".format(filename, problem))
        return 0
    from llmgw_agent.discover import DiscoveryError, collect_facts

    try:
        facts = collect_facts(replay=args.replay, model_dirs=args.model_dir)
    except DiscoveryError as exc:
        sys.stderr.write("llmgw doctor: {}\n".format(exc))
        return 2
    if args.facts:
        print(json.dumps(facts, indent=None if args.json else 2, sort_keys=True))
        return 0
    try:
        state = paths.state_dir()
    except OSError:
        state = None
    checks = run_checks(facts, state_dir=state)
    if args.json:
        print(json.dumps({"checks": checks}))
    else:
        print(format_checks(checks))
    return 1 if any(c["status"] == "fail" for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())

"""The doctor's checks of the hardware: driver, cards, NVLink, fabric, IMEX, adapters (pure).

Each takes the node's facts and returns its checks; `hardware_checks` runs
them in the order a person reads them (the card before what joins cards).
"""

from __future__ import annotations

from typing import Any, Dict, List

from llmgw_agent.doctor.check import Check, check


def _driver_checks(facts: Dict[str, Any]) -> List[Check]:
    host = facts.get("host") or {}
    cards = facts.get("cards") or []
    errors = facts.get("errors") or []
    if host.get("cpu_only") and not cards:
        return [check("driver", "pass", "CPU-only node: no NVIDIA driver expected")]
    if not cards:
        reason = "; ".join(errors) if errors else "no NVIDIA GPU was found"
        return [
            check(
                "driver",
                "fail",
                "the NVIDIA driver is not reachable: {}".format(reason),
                "install the NVIDIA driver so that `nvidia-smi` runs, or set LLMGW_CPU_ONLY=1 "
                "on a node that has no GPU on purpose",
            )
        ]
    checks = [
        check(
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
            check(
                "nvml",
                "warn",
                "NVML is not used (pynvml is not installed): facts come from nvidia-smi",
                "pip install nvidia-ml-py for faster, finer facts (optional)",
            )
        )
    elif source == "nvml":
        checks.append(check("nvml", "pass", "NVML reachable"))
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
            check(
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
        checks = [check("cards", "pass", "{} card(s) visible: {}".format(len(cards), summary))]
    for card in cards:
        if card.get("memory_mib") is None:
            checks.append(
                check(
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
                check(
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
                check(
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
                check(
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
        return [check("nvlink", "pass", "every card pair is linked by NV{}".format(best))]
    pairs = ", ".join("{}-{} {}".format(a, b, cell) for a, b, cell in weak[:6])
    return [
        check(
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
                check(
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
                check(
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
                check(
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
                check(
                    "fabric",
                    "pass",
                    "every card joined NVLink domain {} (clique {})".format(
                        domain["cluster_uuid"], domain.get("clique_id")
                    ),
                )
            )
        elif any(c.get("fabric") for c in facts["cards"]):
            checks.append(
                check(
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
            check(
                "imex",
                "fail",
                "this node is in an NVLink domain but the IMEX daemon is not installed",
                "install and start nvidia-imex (`systemctl enable --now nvidia-imex`) with the "
                "domain's node list",
            )
        )
    elif imex.get("state") != "UP":
        checks.append(
            check(
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
                check(
                    "imex",
                    "warn",
                    message + ", but some nodes are not connected",
                    "run `nvidia-imex-ctl -N` and look for cells other than C",
                )
            )
        else:
            checks.append(check("imex", "pass", message))
    if not channels:
        checks.append(
            check(
                "imex",
                "fail",
                "no IMEX channel: /dev/nvidia-caps-imex-channels/channel0 is missing, so "
                "multi-node NVLink memory cannot be shared",
                "create it: `nvidia-modprobe -i 0:1` (or load nvidia with "
                "NVreg_CreateImexChannel0=1)",
            )
        )
    else:
        checks.append(check("imex", "pass", "IMEX channel {} present".format(channels[0])))
    return checks


def _adapter_checks(facts: Dict[str, Any]) -> List[Check]:
    adapters = facts.get("adapters") or []
    if not adapters:
        if facts.get("cards"):
            return [
                check(
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
                check(
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
                check(
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
            check(
                "adapters",
                "pass",
                "{} active: {} x {} at {}".format(", ".join(names), len(names), kind, rate_words),
            )
        )
    return checks


def hardware_checks(facts: Dict[str, Any]) -> List[Check]:
    """Every hardware check for a node's facts."""
    checks: List[Check] = []
    checks += _driver_checks(facts)
    checks += _card_checks(facts)
    checks += _nvlink_checks(facts)
    checks += _fabric_checks(facts)
    checks += _imex_checks(facts)
    checks += _adapter_checks(facts)
    return checks

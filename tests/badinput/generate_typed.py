"""Cases for the typed readers: every capture JSON field and every written number, mutated.

One family of faults, covered as a class rather than by example: a value
read without its schema. Each field of a capture's `host.json` (and of the
objects inside it) is set to each
`HOSTILE_JSON` value; each number of a described fleet and of an inventory
to each `HOSTILE_WRITTEN` value; sysfs names, sysfs values and the text
captures get digits no tool prints (superscript `²`, fullwidth `１２`,
Arabic-Indic `٣`: `str.isdigit()` takes all three, `int()` refuses the
first). A value the field takes is either left out (written numbers, where
the run would go on to plan or connect) or must read without naming the
field (`unsaid`); every other must be refused in one sentence naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from generate import HARDWARE, Case

HOSTILE_JSON = {
    "number": "7",
    "negative": "-1",
    "fraction": "1.5",
    "list": "[1, 2]",
    "object": '{"a": 1}',
    "string": '"lots"',
    "empty-string": '""',
    "null": "null",
    "true": "true",
    "superscript": json.dumps("²"),
    "fullwidth": json.dumps("１２", ensure_ascii=False),
    "arabic-indic": json.dumps("٣", ensure_ascii=False),
    "huge": "1" + "0" * 400,
    "huge-float": "1e400",
    "infinity": "Infinity",
    "minus-infinity": "-Infinity",
    "nan": "NaN",
    "control": json.dumps("a\x00b"),
}
"""A JSON value put in each field (JSON text: Python's parser takes NaN and Infinity)."""

_STRINGS = {"string", "empty-string", "superscript", "fullwidth", "arabic-indic"}

FINE = {
    "text": _STRINGS | {"null"},
    "required-text": _STRINGS,
    "count": {"number", "null"},
    "flag": {"true", "null"},
    "list": {"null"},
    "mapping": {"null"},
    "record": {"object", "null"},
    "engine": _STRINGS | {"object"},
    "choice": {"null"},
    "ratio": set(),
    "required-record": set(),
    "ratio-map": {"object"},
}
"""Of `HOSTILE_JSON`, what each kind of field takes (and must read without a word)."""

HOST_FIELDS = {
    **dict.fromkeys(
        (
            "hostname",
            "mgmt_address",
            "mgmt_interface",
            "driver_version",
            "cuda_version",
            "python",
            "kernel",
            "arch",
        ),
        "text",
    ),
    **dict.fromkeys(("cpus", "memory_mib", "pci_gpus"), "count"),
    "cpu_only": "flag",
    "cpu_flags": "list",
    "mounts": "list",
    "engines": "mapping",
    "keepalive": "record",
    "sim": "record",
}
"""Every field of `host.json` the agent reads, by kind."""

HOST_NESTED = {
    "cpu-flags-item": ('{{"cpu_flags": [{}]}}', "required-text", "cpu_flags[0]"),
    "mounts-item": ('{{"mounts": [{}]}}', "required-record", "mounts[0]"),
    "mounts-path": ('{{"mounts": [{{"path": {}, "fs_type": "nfs"}}]}}', "required-text", "mounts[0].path"),
    "mounts-fs-type": ('{{"mounts": [{{"path": "/m", "fs_type": {}}}]}}', "required-text", "mounts[0].fs_type"),
    "engine": ('{{"engines": {{"vllm": {}}}}}', "engine", "engines.vllm"),
    "engine-version": ('{{"engines": {{"vllm": {{"version": {}}}}}}}', "text", "engines.vllm"),
    "engine-path": ('{{"engines": {{"vllm": {{"path": {}}}}}}}', "text", "engines.vllm"),
    "keepalive-method": ('{{"keepalive": {{"method": {}, "reason": "r"}}}}', "choice", "keepalive.method"),
    "keepalive-reason": ('{{"keepalive": {{"reason": {}}}}}', "required-text", "keepalive.reason"),
    "fabric-ratios": ('{{"sim": {{"fabric_ratio": {}}}}}', "ratio-map", "sim.fabric_ratio"),
    "fabric-ratio": ('{{"sim": {{"fabric_ratio": {{"mlx5_0": {}}}}}}}', "ratio", "sim.fabric_ratio.mlx5_0"),
}  # fmt: skip
"""Fields inside host.json's lists and objects: (document around `{}`, kind, the field's name)."""

ODD_DIGITS = {
    "superscript": str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"),
    "fullwidth": str.maketrans("0123456789", "０１２３４５６７８９"),
    "arabic-indic": str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"),
}
"""Digits `str.isdigit()` takes and no tool prints."""

ODD_NAMES = {"superscript": "²", "fullwidth": "１", "arabic-indic": "٣", "huge": "1" + "0" * 30}


def _capture(name: str, files: dict[str, bytes], fragment: str, *, unsaid: str = "") -> Case:
    return Case(f"capture-{name}", "capture", "capture", 0, fragment, files=files, unsaid=unsaid)


def _host_case(name: str, document: str, kind: str, value_name: str, field: str) -> Case:
    fine = value_name in FINE[kind]
    return _capture(
        name,
        {"host.json": document.encode()},
        "" if fine else f"host.json: {field}",
        unsaid=f"host.json: {field}" if fine else "",
    )


def host_json_cases() -> Iterator[Case]:
    """Every field of host.json, and every field inside its lists and objects, set to every value."""
    for field, kind in HOST_FIELDS.items():
        for value_name, value in HOSTILE_JSON.items():
            document = f'{{"cpu_only": true, "{field}": {value}}}'
            if field == "cpu_only":
                document = f'{{"cpu_only": {value}}}'
            yield _host_case(f"host-{field}-{value_name}", document, kind, value_name, field)
    for name, (template, kind, field) in HOST_NESTED.items():
        for value_name, value in HOSTILE_JSON.items():
            document = template.format(value)
            yield _host_case(f"host-{name}-{value_name}", document, kind, value_name, field)
    for value_name, value in HOSTILE_JSON.items():
        if value_name in ("object", "null"):
            continue  # an object is host.json's shape; `null` is read as no host.json at all below
        yield _capture(f"host-document-{value_name}", {"host.json": value.encode()}, "host.json")
    yield _capture("host-document-null", {"host.json": b"null"}, "host.json")
    yield _capture(
        "host-document-deep", {"host.json": b"[" * 100_000 + b"]" * 100_000}, "nested too deeply"
    )
    yield _capture(
        "host-document-latin1", {"host.json": '{"hostname": "caf\xe9"}'.encode("latin-1")}, ""
    )


def _port(state: str = "4: ACTIVE", rate: str = "400 Gb/sec (4X NDR)") -> dict[str, bytes]:
    return {"state": state.encode(), "rate": rate.encode(), "link_layer": b"Ethernet\n"}


def _sysfs(device: str, port: str, files: dict[str, bytes]) -> dict[str, bytes]:
    root = f"sys/class/infiniband/{device}"
    out = {f"{root}/hca_type": b"MT4129\n", "host.json": b'{"cpu_only": true}'}
    out.update({f"{root}/ports/{port}/{name}": body for name, body in files.items()})
    return out


def sysfs_cases() -> Iterator[Case]:
    """sysfs names and values in digits no kernel writes: the port is skipped or its value unknown."""
    for name, odd in ODD_NAMES.items():
        yield _capture(f"sysfs-port-named-{name}", _sysfs("mlx5_0", odd, _port()), "")
        yield _capture(f"sysfs-device-named-{name}", _sysfs(odd, "1", _port()), "")
        roce = _port()
        roce[f"gid_attrs/types/{odd}"] = b"RoCE v2\n"
        roce[f"gids/{odd}"] = b"0000:0000:0000:0000:0000:ffff:0a00:0001\n"
        roce["gid_attrs/types/1"] = b"RoCE v2\n"
        roce["gids/1"] = b"fe80:0000:0000:0000:0000:0000:0000:0001\n"
        yield _capture(f"sysfs-gid-named-{name}", _sysfs("mlx5_0", "1", roce), "")
    for name, table in ODD_DIGITS.items():
        yield _capture(
            f"sysfs-rate-{name}",
            _sysfs("mlx5_0", "1", _port(rate="400 Gb/sec".translate(table))),
            "",
        )
        yield _capture(
            f"sysfs-state-{name}",
            _sysfs("mlx5_0", "1", _port(state="4: ACTIVE".translate(table))),
            "",
        )
    yield _capture("sysfs-rate-huge", _sysfs("mlx5_0", "1", _port(rate="9" * 400 + " Gb/sec")), "")


def _fixture(pattern: str) -> str:
    found = sorted(HARDWARE.glob(pattern))
    return found[0].read_text(errors="replace") if found else ""


def text_digit_cases() -> Iterator[Case]:
    """Real text captures with every digit replaced by one no tool prints.

    What is read is read; a capture that then yields nothing is named damaged.
    """
    listing = _fixture("nvidia-smi-L_a100-sxm4-80gb_4gpu_gpu0-mig-4x1g.20gb.txt")
    topo = _fixture("topo-m_h100-80gb-hbm3_8gpu_8nic-mlx5.txt")
    imex = _fixture("nvidia-imex-ctl-N_gh200_2node_domain-up.txt")
    ibstat = _fixture("ibstat_h100-node_8x-cx7-ndr400-ib_plus_bf3-bond-eth.txt")
    xml = _fixture("nvidia-smi-q-x_h100-80gb-hbm3_8gpu_hgx.xml")
    head, _, body = xml.partition("?>")  # the XML declaration's version stays readable
    for name, table in ODD_DIGITS.items():
        yield _capture(
            f"smi-list-digits-{name}", {"nvidia-smi-L.txt": listing.translate(table).encode()}, ""
        )
        yield _capture(
            f"smi-list-mig-size-{name}",
            {"nvidia-smi-L.txt": listing.replace("20gb", "20gb".translate(table)).encode()},
            "",
        )
        yield _capture(
            f"topo-digits-{name}",
            {"nvidia-smi-topo-m.txt": topo.translate(table).encode()},
            "nvidia-smi-topo-m.txt",
        )
        yield _capture(
            f"topo-link-width-{name}",
            {"nvidia-smi-topo-m.txt": topo.replace("NV18", "NV" + "18".translate(table)).encode()},
            "nvidia-smi-topo-m.txt",
        )
        yield _capture(
            f"imex-digits-{name}",
            {"nvidia-imex-ctl-N.txt": imex.translate(table).encode()},
            "nvidia-imex-ctl-N.txt",
        )
        yield _capture(
            f"ibstat-digits-{name}", {"ibstat.txt": ibstat.translate(table).encode()}, "ibstat.txt"
        )
        yield _capture(
            f"smi-xml-digits-{name}",
            {"nvidia-smi-q-x.xml": (head + "?>" + body.translate(table)).encode()},
            "",
        )


HOSTILE_WRITTEN = {
    "nan": ".nan",
    "inf": ".inf",
    "minus-inf": "-.inf",
    "negative": "-1",
    "zero": "0",
    "fraction": "1.5",
    "huge": "99999999999999999999999",
    "huge-float": "1.0e+400",
    "big-float": "1.0e+300",
    "digit-string": "'8'",
    "superscript": "²",
    "fullwidth": "１２",
    "arabic-indic": "٣",
    "bool": "true",
    "list": "[1]",
    "mapping": "{}",
    "null": "null",
}
"""A YAML value put in each number the operator writes (`1.0e+400` is YAML's infinity)."""

FLEET_NUMBERS = {
    "memory-gib-cpu": ("{{name: a, memory_gib: {}}}", {"fraction"}),
    "memory-gib-gpu": ("{{name: a, gpu: h100-80g, gpus: 8, memory_gib: {}}}", {"fraction", "null"}),
    "count": ("{{name: a, count: {}, gpu: h100-80g, gpus: 8}}", set()),
    "gpus": ("{{name: a, gpu: h100-80g, gpus: {}}}", set()),
    "free": ("{{name: a, gpu: h100-80g, gpus: 8, free: {}}}", {"zero", "null"}),
    "busy": ("{{name: a, gpu: h100-80g, gpus: 8, busy: {}}}", {"zero", "null"}),
    "clique": ("{{name: a, gpu: gb200-186g, gpus: 4, nvlink_domain: {{name: d, clique: {}}}}}", {"zero"}),
}  # fmt: skip
"""Every number of a described fleet entry: (the entry around `{}`, the values it takes)."""

INVENTORY_NUMBERS = {
    "rate-gbps": (
        "nodes:\n  - {{name: a, host: h, fabrics: [{{name: ib, hcas: [m], rate_gbps: {}}}]}}\n",
        {"fraction", "null"},
        "rate_gbps",
    ),
    "ssh-banner-grace": (
        "ssh: {{banner_grace_s: {}}}\nnodes: [{{name: a, host: h}}]\n",
        {"fraction"},
        "banner_grace_s",
    ),
    "ssh-connect-timeout": (
        "ssh: {{connect_timeout_s: {}}}\nnodes: [{{name: a, host: h}}]\n",
        {"fraction"},
        "connect_timeout_s",
    ),
    "ssh-max-startups": (
        "ssh: {{max_startups: {}}}\nnodes: [{{name: a, host: h}}]\n",
        set(),
        "max_startups",
    ),
    "ssh-max-handshakes": (
        "ssh: {{max_handshakes: {}}}\nnodes: [{{name: a, host: h}}]\n",
        set(),
        "max_handshakes",
    ),
}
"""Every number of an inventory but the ports (generate.py has those): (text, takes, field)."""


def written_number_cases() -> Iterator[Case]:
    """Each number of a described fleet and an inventory set to each hostile value: exit 2."""
    for field, (entry, takes) in FLEET_NUMBERS.items():
        for value_name, value in HOSTILE_WRITTEN.items():
            if value_name in takes:
                continue  # the run would go on to plan: not bad input
            text = f"fleet:\n  - {entry.format(value)}\nsteps: []\n"
            yield Case(
                f"script-written-fleet-{field}-{value_name}",
                "script",
                "run",
                2,
                "line 2: fleet entry 1",
                files={"script.yaml": text.encode()},
            )
    script = b"steps:\n  - nodes: {}\n"
    for field, (template, takes, key) in INVENTORY_NUMBERS.items():
        for value_name, value in HOSTILE_WRITTEN.items():
            if value_name in takes:
                continue  # the run would go on to connect: not bad input
            yield Case(
                f"inventory-written-{field}-{value_name}",
                "inventory",
                "run",
                2,
                key,
                files={"script.yaml": script, "inventory.yaml": template.format(value).encode()},
                inventory=True,
            )


def typed_capture_cases() -> Iterator[Case]:
    """Every capture case of the typed-reader family."""
    yield from host_json_cases()
    yield from sysfs_cases()
    yield from text_digit_cases()

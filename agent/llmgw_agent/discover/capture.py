"""Writing a capture directory of this node, for a bug report or for replay.

`llmgw doctor --capture DIR` runs the same commands discovery runs and copies
the parts of `/sys/class/infiniband` it reads, so `--replay DIR` later sees
the node exactly as the agent saw it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

from llmgw_agent.discover import CAPTURE_COMMANDS, CPU_ONLY_ENV, run_command
from llmgw_agent.discover import engines as engines_mod
from llmgw_agent.discover import host as host_mod
from llmgw_agent.discover.imex import CHANNEL_DIR

_SYSFS_PORT_FILES = ("state", "phys_state", "rate", "link_layer")
_SYSFS_DEVICE_FILES = ("hca_type", "fw_ver", "board_id")


def copy_sysfs(source: Path, target: Path) -> int:
    """The parts of /sys/class/infiniband discovery reads (sysfs cannot be copied whole)."""
    copied = 0
    if not source.is_dir():
        return copied
    for device in sorted(source.iterdir()):
        out = target / device.name
        for name in _SYSFS_DEVICE_FILES:
            if (device / name).is_file():
                out.mkdir(parents=True, exist_ok=True)
                (out / name).write_text((device / name).read_text(errors="replace"))
                copied += 1
        net = device / "device" / "net"
        if net.is_dir():
            for netdev in net.iterdir():
                (out / "device" / "net" / netdev.name).mkdir(parents=True, exist_ok=True)
        for port in sorted((device / "ports").glob("*")):
            port_out = out / "ports" / port.name
            port_out.mkdir(parents=True, exist_ok=True)
            for name in _SYSFS_PORT_FILES:
                if (port / name).is_file():
                    (port_out / name).write_text((port / name).read_text(errors="replace"))
                    copied += 1
            for sub in ("gid_attrs/types", "gids"):
                for entry in sorted((port / sub).glob("*")):
                    try:
                        value = entry.read_text(errors="replace")
                    except OSError:
                        continue  # unpopulated GID entries refuse reads
                    (port_out / sub).mkdir(parents=True, exist_ok=True)
                    (port_out / sub / entry.name).write_text(value)
                    copied += 1
    return copied


def capture(directory: Path) -> Dict[str, Any]:
    """Write this node's capture directory; return `{files, problems}`.

    Every command is run even when an earlier one fails; what could not be
    captured is listed in `capture.json`, so a partial capture still helps.
    """
    directory.mkdir(parents=True, exist_ok=True)
    problems: Dict[str, str] = {}
    files = []
    for filename, argv in CAPTURE_COMMANDS:
        out, error = run_command(argv)
        if out:
            (directory / filename).write_text(out)
            files.append(filename)
        if error:
            problems[filename] = error
    copied = copy_sysfs(Path("/sys/class/infiniband"), directory / "sys" / "class" / "infiniband")
    if copied:
        files.append("sys/class/infiniband")
    channels = Path("/") / CHANNEL_DIR
    if channels.is_dir():
        for channel in channels.iterdir():
            (directory / CHANNEL_DIR).mkdir(parents=True, exist_ok=True)
            (directory / CHANNEL_DIR / channel.name).write_text("")
    host = host_mod.live_host()
    host["cpu_only"] = os.environ.get(CPU_ONLY_ENV, "") in ("1", "true", "yes")
    host["engines"] = engines_mod.live_engines()
    (directory / "host.json").write_text(json.dumps(host, indent=2, sort_keys=True) + "\n")
    files.append("host.json")
    (directory / "capture.json").write_text(json.dumps({"problems": problems}, indent=2) + "\n")
    return {"files": files, "problems": problems}

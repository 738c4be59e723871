"""Discovery: the facts of this node, from NVML, nvidia-smi, or a capture directory.

`collect_facts(replay=None, model_dirs=())` returns one JSON-serialisable dict:

- `agent_version`, `source` (`nvml` | `nvidia-smi` | `replay:<dir>` | `none`), `errors`
  (sentences about what could not be read);
- `host`: hostname, cpus, memory_mib, mgmt_address, mgmt_interface,
  driver_version, cuda_version, python, kernel, arch, pci_gpus (NVIDIA GPUs
  on the PCI bus), cpu_only;
- `cards`: each physical card: index, name, uuid, pci_bus_id, memory_mib,
  memory_used_mib, utilization_pct, temperature_c, power_w,
  compute_capability, class, mig_mode, numa_node, cpu_affinity, nearest_nic,
  fabric (None or {state, status, clique_id, cluster_uuid, health, verdict}),
  platform, processes, out_of_placement;
- `gpus`: what placement sees: a whole card, or each MIG instance of a card
  in MIG mode (id `1000 + 100 x card + instance`, label `card/migN`), with
  uuid, class, mig_profile, memory and live values (utilization_pct is None
  for a MIG instance: unknown, not zero);
- `nvlink` ({"0": {"1": "NV18"}}), `nic_affinity`, `adapters`, `nvlink_domain`,
  `imex`, `imex_channels`, `engines` ({name: {version, path}}), `model_dirs`
  ({path: {state, shared, fs_type, models}}), `keepalive` ({method, reason}:
  how shards outlive the SSH session; method None when nothing can),
  `rail_verdicts` (the fabric verdicts kept here, per peer node and adapter:
  `fabric.verdicts.read_verdicts`).

Simulated memory (replay mode only): each running sim engine writes
`paths.sim_usage_dir()/<pid>.json` =
`{"pid": int, "gpus": [card index, placement id, label "3/mig1" or UUID, ...],
"used_mib": int}` (used_mib counted on each GPU listed). Discovery adds that
memory and a `sim-engine` process to the GPUs named; files whose pid is no
longer alive are ignored and deleted.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from llmgw_agent import __version__, paths
from llmgw_agent.discover import engines as engines_mod
from llmgw_agent.discover import host as host_mod
from llmgw_agent.discover import ib, imex, smi, storage, topo
from llmgw_agent.discover.assemble import apply_sim_usage, build_facts
from llmgw_agent.discover.schema import (
    CaptureError,
    Either,
    ListOf,
    Record,
    Text,
    Whole,
    read_json,
)
from llmgw_agent.discover.schema import read_text as read_capture_text
from llmgw_agent.executables import which

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Optional, Tuple

CPU_ONLY_ENV = "LLMGW_CPU_ONLY"
"""Set to 1 on a node that has no GPU on purpose (doctor then warns instead of failing)."""

CAPTURE_COMMANDS = (
    ("nvidia-smi-q-x.xml", ("nvidia-smi", "-q", "-x")),
    ("nvidia-smi-L.txt", ("nvidia-smi", "-L")),
    ("nvidia-smi-topo-m.txt", ("nvidia-smi", "topo", "-m")),
    ("nvidia-imex-ctl-N.txt", ("nvidia-imex-ctl", "-N")),
    ("ibstat.txt", ("ibstat",)),
)
"""What a capture directory holds and the command that writes each file."""

COMMAND_TIMEOUT_S = 30.0


class DiscoveryError(ValueError):
    """Discovery cannot start at all (a replay directory that is not there)."""


def run_command(
    argv: Iterable[str], timeout_s: float = COMMAND_TIMEOUT_S
) -> Tuple[Optional[str], Optional[str]]:
    """Run a tool; `(stdout, None)` on success, `(stdout or None, sentence)` on failure."""
    argv = list(argv)
    if which(argv[0]) is None:
        return None, "{} is not installed (not on PATH)".format(argv[0])
    import subprocess  # only where a tool runs: replay and NVML never need it

    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, "{} did not answer within {:.0f} s".format(" ".join(argv), timeout_s)
    except OSError as exc:
        return None, "{} could not run: {}".format(" ".join(argv), exc)
    out = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        # nvidia-smi prints its own failure ("couldn't communicate with the driver") on stdout.
        said = (done.stderr.decode(errors="replace").strip() or out.strip()).splitlines()
        reason = said[-1].strip() if said else "exit status {}".format(done.returncode)
        return (out or None), "{} failed: {}".format(" ".join(argv), reason)
    return out, None


def _read(path: Path, errors: List[str]) -> Optional[str]:
    """A capture file's text, None when absent; one that cannot be read is named in `errors`."""
    try:
        return read_capture_text(path)
    except CaptureError as exc:
        errors.append(str(exc))
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


SIM_USAGE_SCHEMA = Record(
    {
        "pid": Whole(1, 1 << 22),  # the kernel's pid_max
        "gpus": ListOf(Either(Whole(0, 1 << 20), Text())),
        "used_mib": Whole(0, 1 << 40),
    },
    required=("pid",),
)
"""A sim engine's usage file (see the module docstring): the GPUs it names and the MiB it holds."""


def read_sim_usage(directory: Path) -> List[Dict[str, Any]]:
    """The usage files of live sim engines, read by `SIM_USAGE_SCHEMA`; dead engines' are deleted."""
    usages: List[Dict[str, Any]] = []
    if not directory.is_dir():
        return usages
    for path in sorted(directory.glob("*.json")):
        try:
            present, document = read_json(path)
            usage = SIM_USAGE_SCHEMA.read(document, str(path)) if present else None
        except CaptureError:
            continue  # being written, or not ours: the next refresh reads it
        if usage is None:
            continue
        pid = usage["pid"]
        if not _pid_alive(pid):
            with contextlib.suppress(OSError):  # another reader removed it first
                path.unlink()
            continue
        usages.append(usage)
    return usages


def keepalive_facts() -> Optional[Dict[str, Any]]:
    """How shards outlive the SSH session here: `{method, reason}` (method None: no way)."""
    try:
        from llmgw_agent.keepalive import keepalive_method
    except ImportError:
        return None  # an agent built without supervision
    method, reason = keepalive_method()
    return {"method": method, "reason": reason}


def _model_dirs(model_dirs: Iterable[str], mounts: List[Dict[str, str]]) -> Dict[str, Any]:
    return {str(path): storage.scan_model_dir(str(path), mounts) for path in model_dirs}


def unread(name: str, text: Optional[str], read_something: bool) -> Optional[str]:
    """The sentence for a capture that holds text but yielded nothing, or None.

    A damaged `topo -m` or `ibstat` must not pass for "no NVLink" or "no
    adapters": the operator is told which file could not be read.
    """
    if not text or not text.strip() or read_something:
        return None
    return "{}: nothing could be read from its {} lines; the capture is damaged".format(
        name, len(text.splitlines())
    )


def _replay_facts(directory: Path, model_dirs: Iterable[str]) -> Dict[str, Any]:
    if not directory.is_dir():
        raise DiscoveryError(
            "the replay directory {} does not exist: give a capture directory "
            "written by `llmgw doctor --capture DIR`".format(directory)
        )
    errors: List[str] = []
    try:
        recorded = host_mod.read_host_json(directory / "host.json", errors)
    except CaptureError as exc:
        recorded = {}
        errors.append(str(exc))
    smi_log = None
    xml_text = _read(directory / "nvidia-smi-q-x.xml", errors)
    text_q = _read(directory / "nvidia-smi-q.txt", errors)
    try:
        if xml_text is not None:
            smi_log = smi.parse_smi_xml(xml_text)
        elif text_q is not None:
            smi_log = smi.parse_smi_text(text_q)
    except smi.SmiParseError as exc:
        errors.append("{}: {}".format(directory / "nvidia-smi-q-x.xml", exc))
    listing_text = _read(directory / "nvidia-smi-L.txt", errors)
    listing = smi.parse_smi_list(listing_text) if listing_text else []
    if smi_log is None and not listing and not recorded.get("cpu_only"):
        errors.append("nvidia-smi is not installed (not on PATH)")
    topo_text = _read(directory / "nvidia-smi-topo-m.txt", errors)
    imex_text = _read(directory / "nvidia-imex-ctl-N.txt", errors)
    sys_ib = directory / "sys" / "class" / "infiniband"
    ibstat_text = None
    if sys_ib.is_dir():
        adapters = ib.read_sysfs(sys_ib)
    else:
        ibstat_text = _read(directory / "ibstat.txt", errors)
        adapters = ib.parse_ibstat(ibstat_text) if ibstat_text else []
    topo_parsed = topo.parse_topo(topo_text) if topo_text else None
    imex_parsed = imex.parse_imex_nodes(imex_text) if imex_text else None
    for name, text, read in (
        ("nvidia-smi-topo-m.txt", topo_text, topo.is_whole(topo_parsed)),
        ("nvidia-imex-ctl-N.txt", imex_text, bool(imex_parsed and imex_parsed.get("nodes"))),
        ("ibstat.txt", None if sys_ib.is_dir() else ibstat_text, bool(adapters)),
    ):
        sentence = unread(str(directory / name), text, read)
        if sentence:
            errors.append(sentence)
    host = host_mod.replay_host(recorded)
    host["cpu_only"] = bool(recorded.get("cpu_only"))
    mounts = (recorded.get("mounts") or []) + storage.live_mounts()
    facts = build_facts(
        smi=smi_log,
        listing=listing,
        topo=topo_parsed,
        adapters=adapters,
        imex=imex_parsed,
        imex_channels=imex.imex_channels(directory),
        host=host,
        engines=engines_mod.replay_engines(recorded),
        model_dirs=_model_dirs(model_dirs, mounts),
        source="replay:{}".format(directory),
        agent_version=__version__,
        errors=errors,
    )
    apply_sim_usage(facts, read_sim_usage(paths.sim_usage_dir()))
    # Simulated shards run on this machine, so its own keepalive applies unless recorded.
    facts["keepalive"] = recorded.get("keepalive") or keepalive_facts()
    return facts


def _live_facts(model_dirs: Iterable[str]) -> Dict[str, Any]:
    from llmgw_agent.discover import nvml

    errors: List[str] = []
    smi_log, nvml_error = nvml.read_cards()
    source = "nvml" if smi_log is not None else "none"
    if smi_log is None:
        xml_text, error = run_command(CAPTURE_COMMANDS[0][1])
        if error:
            errors.append(error if nvml_error is None else "{}; {}".format(nvml_error, error))
        elif xml_text:
            try:
                smi_log = smi.parse_smi_xml(xml_text)
                source = "nvidia-smi"
            except smi.SmiParseError as exc:
                errors.append(str(exc))
    listing: List[Dict[str, Any]] = []
    topo_parsed = None
    if which("nvidia-smi"):
        listing_text, error = run_command(CAPTURE_COMMANDS[1][1])
        listing = smi.parse_smi_list(listing_text or "")
        topo_text, error = run_command(CAPTURE_COMMANDS[2][1])
        topo_parsed = topo.parse_topo(topo_text) if topo_text else None
    imex_parsed = None
    if which("nvidia-imex-ctl"):
        imex_text, error = run_command(CAPTURE_COMMANDS[3][1], timeout_s=10.0)
        imex_parsed = imex.parse_imex_nodes(imex_text or "")
        if error:
            imex_parsed["error"] = error
    adapters = ib.read_sysfs(Path("/sys/class/infiniband"))
    if not adapters and which("ibstat"):
        ibstat_text, _ = run_command(CAPTURE_COMMANDS[4][1], timeout_s=10.0)
        adapters = ib.parse_ibstat(ibstat_text or "")
    host = host_mod.live_host()
    host["cpu_only"] = os.environ.get(CPU_ONLY_ENV, "") in ("1", "true", "yes")
    facts = build_facts(
        smi=smi_log,
        listing=listing,
        topo=topo_parsed,
        adapters=adapters,
        imex=imex_parsed,
        imex_channels=imex.imex_channels(Path("/")),
        host=host,
        engines=engines_mod.live_engines(),
        model_dirs=_model_dirs(model_dirs, storage.live_mounts()),
        source=source,
        agent_version=__version__,
        errors=errors,
    )
    facts["keepalive"] = keepalive_facts()
    return facts


def collect_facts(replay: Optional[str] = None, model_dirs: Iterable[str] = ()) -> Dict[str, Any]:
    """This node's facts (see the module docstring for the shape).

    `replay` is a capture directory; None falls back to `LLMGW_AGENT_REPLAY`,
    and without either the real hardware is read. Raises `DiscoveryError`
    only when a replay directory is named and absent; everything else that
    cannot be read becomes a sentence in `errors`.
    """
    directory = paths.replay_dir(replay)
    if directory is not None:
        facts = _replay_facts(directory, model_dirs)
    else:
        facts = _live_facts(model_dirs)
    facts["rail_verdicts"] = _rail_verdicts()
    return job_cards_only(facts, dict(os.environ))


JOB_GPUS_ENV = "LLMGW_JOB_GPUS"
"""The cards of the Slurm job an agent serves in (set by `hold` only)."""


def job_cards_only(facts: Dict[str, Any], env: Dict[str, str]) -> Dict[str, Any]:
    """Inside a Slurm job's `hold`, the cards the scheduler gave the job and no others.

    The allocation is the claim: a job's agent that offered every card of the
    node would let placement take cards another user's job holds. `hold`
    (`llmgw_agent.slurm_hold`) names the job's cards on this node in
    `LLMGW_JOB_GPUS`, as Slurm gave them to its step (indices of the node's
    cards). Anywhere else (an agent over SSH, the demo run from inside some
    job) the facts are left as read.
    """
    listed = env.get(JOB_GPUS_ENV)
    if listed is None:
        return facts
    try:
        given = {int(part) for part in listed.split(",") if part.strip()}
    except ValueError:
        unread = "the job's cards cannot be read from {!r}: no card is offered".format(listed)
        facts["errors"] = [*(facts.get("errors") or []), unread]
        given = set()
    facts["cards"] = [c for c in facts.get("cards") or [] if c.get("index") in given]
    facts["gpus"] = [g for g in facts.get("gpus") or [] if g.get("card_index") in given]
    return facts


def _rail_verdicts() -> List[Dict[str, Any]]:
    try:
        from llmgw_agent.fabric.verdicts import read_verdicts
    except ImportError:
        return []  # an agent built without fabric verdicts
    return read_verdicts()

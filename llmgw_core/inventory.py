"""The operator's inventory: which nodes, how to reach them, what their fabrics are.

`~/.config/llmgw/inventory.yaml` (or `--inventory FILE`):

    defaults: {user: ops, model_dirs: [/var/lib/llmgw-models]}
    nodes:
      - name: gpu-a-01
        host: gpu-a-01.internal          # or an alias from ~/.ssh/config
        fabrics: [{name: ib-a, hcas: [mlx5_0, mlx5_1], rate_gbps: 400}]
    known_hosts: ~/.ssh/known_hosts
    clusters:                            # scheduled clusters: their nodes come from the scheduler
      - name: hpc-a
        slurm: {login: hpc-login, partition: gpu, account: ml, time_limit: "1-00:00:00"}

Everything is validated before a single connection is opened, and every
mistake is reported as one sentence naming the line it is on. Fabrics are
named here and never guessed: a matching subnet prefix proves nothing about
which adapters can reach each other.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from llmgw_core.errors import BadInput
from llmgw_core.slurm.options import (
    check_constraint,
    check_gres_name,
    check_slurm_name,
    check_time_limit,
)
from llmgw_core.written_numbers import MAX_RATE_GBPS, Amount, Count
from llmgw_core.yaml_text import line_of, load_checked, read_text_file

DEFAULT_INVENTORY = "~/.config/llmgw/inventory.yaml"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
HOST = re.compile(r"^[A-Za-z0-9_:\[][A-Za-z0-9_.:%\[\]-]*$")
"""A host name, an IPv4/IPv6 address or an ~/.ssh/config alias; never an option or a shell word."""
USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*[$]?$")
WORD = re.compile(r"^[=^]?[A-Za-z0-9_][A-Za-z0-9_.:@,+-]*$")
"""Adapter, interface and fabric names (NCCL_SOCKET_IFNAME takes `^` and `=` prefixes)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _checked_path(path: str) -> str:
    if not path:
        raise ValueError("must not be empty")
    if _CONTROL.search(path):
        raise ValueError("must not hold a newline or another control character")
    if path.startswith("-"):
        raise ValueError("must not start with '-'")
    return path


def _checked_label(text: str) -> str:
    if _CONTROL.search(text):
        raise ValueError("must not hold a newline or another control character")
    return text


def _checked(pattern: re.Pattern[str], what: str) -> Any:
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"must be {what}")
        return value

    return AfterValidator(check)


HostText = Annotated[str, _checked(HOST, "a host name, an address or an ssh alias")]
UserText = Annotated[str, _checked(USER, "a user name")]
WordText = Annotated[str, _checked(WORD, "a name of letters, digits, '.', '_', ':' or '-'")]
PathText = Annotated[str, AfterValidator(_checked_path)]


def _checked_address(text: str) -> str:
    import ipaddress

    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ValueError("must be an IP address (0.0.0.0 for every address)") from None


BindText = Annotated[str, AfterValidator(_checked_address)]
LabelText = Annotated[str, AfterValidator(_checked_label)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Fabric(_Strict):
    """A fabric the node is wired into: its name and the adapters on it."""

    name: WordText = Field(min_length=1)
    hcas: tuple[WordText, ...] = Field(min_length=1)
    rate_gbps: Amount | None = Field(default=None, gt=0, le=MAX_RATE_GBPS)


class BinaryEngine(_Strict):
    """An engine found as its own executable (`vllm`, `llama-server`)."""

    bin: PathText = Field(min_length=1)


class PythonEngine(_Strict):
    """An engine run as a module of an interpreter that has it installed."""

    python: PathText = Field(min_length=1)


class EngineLocations(_Strict):
    """Where each engine lives on a node; absent engines are looked up on PATH."""

    vllm: BinaryEngine | None = None
    sglang: PythonEngine | None = None
    llama_cpp: BinaryEngine | PythonEngine | None = Field(default=None, alias="llama.cpp")
    router: BinaryEngine | None = None
    """A router (`vllm-router`), not an engine: found the same way (doctor reports it; the gateway routes by itself)."""


class Defaults(_Strict):
    """Values every node takes unless it says otherwise."""

    user: UserText | None = None
    port: Count | None = Field(default=None, ge=1, le=65535)
    identity_file: PathText | None = None
    mgmt_interface: WordText | None = None
    engine_bind: BindText | None = None
    model_dirs: tuple[PathText, ...] = ()
    engines: EngineLocations | None = None
    work_dir: PathText | None = None
    labels: dict[LabelText, LabelText] = Field(default_factory=dict)


class InventoryNode(_Strict):
    """One node as written in the inventory (before defaults are applied)."""

    name: str
    host: HostText = Field(min_length=1)
    port: Count | None = Field(default=None, ge=1, le=65535)
    user: UserText | None = None
    identity_file: PathText | None = None
    mgmt_interface: WordText | None = None
    engine_bind: BindText | None = None
    """The address engines listen on; default: the node's management address."""
    fabrics: tuple[Fabric, ...] = ()
    labels: dict[LabelText, LabelText] = Field(default_factory=dict)
    model_dirs: tuple[PathText, ...] | None = None
    replay: PathText | None = None
    engines: EngineLocations | None = None
    work_dir: PathText | None = None

    @field_validator("name")
    @classmethod
    def _name_is_a_token(cls, name: str) -> str:
        if not NODE_NAME.match(name):
            raise ValueError(
                "must start with a letter or digit and hold only letters, digits, '.', '_' or '-'"
            )
        return name

    @model_validator(mode="after")
    def _fabric_names_unique(self) -> InventoryNode:
        names = [fabric.name for fabric in self.fabrics]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise ValueError(f"fabric {duplicated[0]!r} is listed twice")
        return self


class NodeSpec(_Strict):
    """A node with the defaults applied: what the fleet connects to.

    `port`, `user` and `identity_file` stay None where neither the node nor
    the defaults set them, so the operator's `~/.ssh/config` decides.
    """

    name: str
    host: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    mgmt_interface: str | None = None
    engine_bind: str | None = None
    fabrics: tuple[Fabric, ...] = ()
    labels: dict[str, str] = Field(default_factory=dict)
    model_dirs: tuple[str, ...] = ()
    replay: str | None = None
    engines: EngineLocations = Field(default_factory=EngineLocations)
    work_dir: str | None = None
    relay: str | None = None
    """A node of a Slurm job: the command, run on `host` (the cluster's login node), that
    carries the channel to the agent the job already runs there (`llmgw_core.slurm.hold`),
    instead of starting an agent. Never written in an inventory: the fleet adds such nodes
    when a job runs."""
    cluster: str | None = None
    """The cluster whose job this node is part of (with `relay`)."""
    job_id: str | None = None
    """The Slurm job this node is part of (with `relay`)."""
    login_of: str | None = None
    """The cluster whose login node this is: its agent keeps the services' leases and may run
    gateways, and placement never puts a replica on it. Never written in an inventory: each
    cluster's login node joins the fleet so."""


SlurmName = Annotated[str, AfterValidator(check_slurm_name)]
TimeLimitText = Annotated[str, AfterValidator(check_time_limit)]


class SlurmSettings(_Strict):
    """How llmgw reaches a Slurm cluster and what every job it submits there carries
    (`sbatch --partition/--account/--qos/--constraint/--reservation/--time`).

    The nodes, their cards and states are not written here: they come from the
    scheduler (see docs/slurm.md).
    """

    login: HostText = Field(min_length=1)
    """The login node: a host name, an address or an ~/.ssh/config alias (ProxyJump allowed)."""
    port: Count | None = Field(default=None, ge=1, le=65535)
    user: UserText | None = None
    identity_file: PathText | None = None
    """How the login node is reached where ~/.ssh/config does not say (as a node's are)."""
    partition: SlurmName = Field(min_length=1)
    account: SlurmName | None = None
    qos: SlurmName | None = None
    constraint: Annotated[str, AfterValidator(check_constraint)] | None = None
    reservation: SlurmName | None = None
    time_limit: TimeLimitText | None = None
    """As Slurm writes it: `MINUTES`, `HH:MM:SS`, `D-HH:MM:SS` or `UNLIMITED`."""
    gres_name: Annotated[str, AfterValidator(check_gres_name)] = "gpu"
    """What the site calls its cards in GRES (`--gres=gpu:h100:8`)."""
    replay: PathText | None = None
    """A folder of hardware captures, one per Slurm node name, that each node's agent reads
    instead of its hardware (the suite's cluster, whose nodes are all one machine)."""


class InventoryCluster(_Strict):
    """A scheduled cluster: one entry for all its nodes, reached through its scheduler."""

    name: str
    slurm: SlurmSettings
    fabrics: tuple[Fabric, ...] = ()
    """The InfiniBand/RoCE fabrics every node of the cluster is wired into, named as a node's
    are (never guessed): a job's nodes join them, so a replica may span nodes."""
    labels: dict[LabelText, LabelText] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name_is_a_token(cls, name: str) -> str:
        return InventoryNode._name_is_a_token(name)


class SshLimits(_Strict):
    """How hard the console presses on sshd's and bastions (`ssh:`; see docs/scale.md).

    Attributes:
        max_startups: handshakes in flight per server address, below its
            sshd's `MaxStartups` (10 by default).
        max_startups_per_bastion: node handshakes in flight through one bastion.
        max_handshakes: handshakes in flight in all.
        banner_grace_s: how long a node that accepted TCP but sent no banner
            keeps its slot before giving it back (it keeps waiting without).
        banner_timeout_s: when such a node is given up (retried with backoff).
        connect_timeout_s: the bound on a whole connect, handshake and login.
    """

    max_startups: Count = Field(default=8, ge=1, le=10_000)
    max_startups_per_bastion: Count = Field(default=10, ge=1, le=10_000)
    max_handshakes: Count = Field(default=32, ge=1, le=10_000)
    banner_grace_s: Amount = Field(default=1.0, gt=0, le=600)
    banner_timeout_s: Amount = Field(default=10.0, gt=0, le=600)
    connect_timeout_s: Amount = Field(default=15.0, gt=0, le=600)


class Inventory(_Strict):
    """The whole inventory file."""

    defaults: Defaults = Field(default_factory=Defaults)
    nodes: tuple[InventoryNode, ...] = ()
    """SSH nodes; at least one node or one cluster (checked in `parse_inventory`, with its line)."""
    clusters: tuple[InventoryCluster, ...] = ()
    known_hosts: PathText = DEFAULT_KNOWN_HOSTS
    ssh: SshLimits = Field(default_factory=SshLimits)
    _job_nodes: tuple[NodeSpec, ...] = PrivateAttr(default=())

    def node_specs(self) -> list[NodeSpec]:
        """Every node with the defaults applied, in inventory order, then each Slurm
        cluster's login node (`login_spec`), then the nodes of the Slurm jobs the fleet has
        joined (`with_job_nodes`)."""
        return (
            [apply_defaults(node, self.defaults) for node in self.nodes]
            + [login_spec(cluster) for cluster in self.clusters]
            + list(self._job_nodes)
        )

    def with_job_nodes(self, specs: tuple[NodeSpec, ...]) -> Inventory:
        """This inventory with `specs` as the nodes of running Slurm jobs (replacing any)."""
        copied = self.model_copy()
        copied._job_nodes = tuple(specs)
        return copied

    def node_spec(self, name: str) -> NodeSpec:
        """One node by name.

        Raises:
            BadInput: when no node has that name.
        """
        for spec in self.node_specs():
            if spec.name == name:
                return spec
        names = ", ".join(spec.name for spec in self.node_specs())
        raise BadInput(f"no node is named {name!r} in the inventory", f"its nodes are {names}")

    def cluster(self, name: str) -> InventoryCluster:
        """One scheduled cluster by name.

        Raises:
            BadInput: when no cluster has that name.
        """
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        names = ", ".join(cluster.name for cluster in self.clusters) or "none"
        raise BadInput(
            f"no cluster is named {name!r} in the inventory", f"its clusters are {names}"
        )

    def known_hosts_path(self) -> Path:
        """The known_hosts file host keys are checked against."""
        return Path(self.known_hosts).expanduser()


def login_spec(cluster: InventoryCluster) -> NodeSpec:
    """A cluster's login node as a node of the fleet (`NodeSpec.login_of`): `<cluster>-login`."""
    return NodeSpec(
        name=f"{cluster.name}-login",
        host=cluster.slurm.login,
        port=cluster.slurm.port,
        user=cluster.slurm.user,
        identity_file=cluster.slurm.identity_file,
        labels={"slurm-cluster": cluster.name, "slurm-login": "true"},
        login_of=cluster.name,
    )


def apply_defaults(node: InventoryNode, defaults: Defaults) -> NodeSpec:
    """A node's own values, falling back to the defaults field by field."""
    return NodeSpec(
        name=node.name,
        host=node.host,
        port=node.port if node.port is not None else defaults.port,
        user=node.user or defaults.user,
        identity_file=node.identity_file or defaults.identity_file,
        mgmt_interface=node.mgmt_interface or defaults.mgmt_interface,
        engine_bind=node.engine_bind or defaults.engine_bind,
        fabrics=node.fabrics,
        labels={**defaults.labels, **node.labels},
        model_dirs=node.model_dirs if node.model_dirs is not None else defaults.model_dirs,
        replay=node.replay,
        engines=node.engines or defaults.engines or EngineLocations(),
        work_dir=node.work_dir or defaults.work_dir,
    )


def default_inventory_path() -> Path:
    """Where the inventory lives when `--inventory` is not given."""
    return Path(DEFAULT_INVENTORY).expanduser()


def load_inventory(path: str | os.PathLike[str] | None = None) -> Inventory:
    """Read and validate an inventory file (the default one when `path` is None).

    Relative `identity_file` and `known_hosts` paths are taken from the
    inventory's own folder; `~` is expanded.

    Raises:
        BadInput: one sentence naming the file, the line and the fix.
    """
    file = Path(path).expanduser() if path is not None else default_inventory_path()
    try:
        text = read_text_file(file, f"the inventory {file}")
    except FileNotFoundError:
        fix = "write one (see docs/inventory.md), pass --inventory FILE, or try --demo"
        raise BadInput(f"the inventory {file} does not exist", fix) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise BadInput(f"cannot read the inventory {file}: {reason}") from None
    return parse_inventory(text, source=str(file), folder=file.resolve().parent)


def parse_inventory(
    text: str, *, source: str = "inventory", folder: Path | None = None
) -> Inventory:
    """Validate inventory YAML text; see `load_inventory`.

    Raises:
        BadInput: naming the line and what is wrong with it.
    """
    root, raw = _compose(text, source)
    _time_limits_as_written(root, raw)
    try:
        inventory = Inventory.model_validate(raw)
    except ValidationError as exc:
        raise BadInput(_first_problem(exc, root, source)) from None
    _refuse_an_empty_fleet(inventory, root, raw, source)
    _refuse_duplicate_names(inventory, root, source)
    inventory = _with_local_paths(inventory, folder or Path.cwd())
    _check_identity_files(inventory, root, source)
    return inventory


def _compose(text: str, source: str) -> tuple[yaml.MappingNode, Any]:
    root, raw = load_checked(text, source)
    if root is None:
        raise BadInput(f"{source} is empty", "give it a `nodes:` list")
    if not isinstance(root, yaml.MappingNode) or not isinstance(raw, dict):
        raise BadInput(
            f"{source}: line {_line(root)}: an inventory is a mapping with `nodes:`",
            "see docs/inventory.md",
        )
    return root, raw


def _line(node: yaml.Node) -> int:
    return line_of(node)


def _node_at(root: yaml.Node, loc: tuple[Any, ...]) -> yaml.Node:
    """The YAML node a validation error location points at (as deep as it exists)."""
    current: yaml.Node = root
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(current, yaml.MappingNode):
            match = next(((k, v) for k, v in current.value if k.value == str(part)), None)
            if match is None:
                return current
            current = match[0] if last else match[1]
        elif isinstance(current, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(current.value):
                return current
            current = current.value[part]
        else:
            return current
    return current


def _first_problem(error: ValidationError, root: yaml.Node, source: str) -> str:
    item = error.errors()[0]
    loc = tuple(part for part in item["loc"] if not _is_union_tag(part))
    where = _describe(loc)
    line = _line(_node_at(root, loc))
    kind = item["type"]
    if kind == "extra_forbidden":
        return f"{source}: line {line}: unknown key {loc[-1]!r} in {_describe(loc[:-1])}"
    if kind == "missing":
        return f"{source}: line {line}: {where} is required"
    message = item["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    message = message.replace("Tuple should", "List should").replace("tuple should", "list should")
    value = item.get("input")
    shown = f" (got {value!r})" if isinstance(value, str | int | float | bool) else ""
    return f"{source}: line {line}: {where}: {message[0].lower()}{message[1:]}{shown}"


def _is_union_tag(part: Any) -> bool:
    """Pydantic puts the tried union member's class name in the location."""
    return isinstance(part, str) and part[:1].isupper()


def _describe(loc: tuple[Any, ...]) -> str:
    if not loc:
        return "the inventory"
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return f"`{text}`"


def _time_limits_as_written(root: yaml.MappingNode, raw: dict[str, Any]) -> None:
    """A cluster's `time_limit` as the operator wrote it: YAML 1.1 reads an unquoted
    `2:00:00` as the number 7200 (base 60), which would then pass as 7200 minutes."""
    clusters = raw.get("clusters")
    if not isinstance(clusters, list):
        return
    for index, cluster in enumerate(clusters):
        slurm = cluster.get("slurm") if isinstance(cluster, dict) else None
        if not isinstance(slurm, dict) or not isinstance(slurm.get("time_limit"), int):
            continue
        # One step past the key: `_node_at` stops at the last key's own node, not its value.
        written = _node_at(root, ("clusters", index, "slurm", "time_limit", "its value"))
        if isinstance(written, yaml.ScalarNode) and not isinstance(slurm["time_limit"], bool):
            slurm["time_limit"] = written.value


def _refuse_an_empty_fleet(
    inventory: Inventory, root: yaml.MappingNode, raw: dict[str, Any], source: str
) -> None:
    if inventory.nodes or inventory.clusters:
        return
    if "nodes" in raw:
        line = _line(_node_at(root, ("nodes",)))
        raise BadInput(
            f"{source}: line {line}: `nodes`: list should have at least 1 item",
            "list a node, or a Slurm cluster under `clusters:`",
        )
    raise BadInput(
        f"{source}: line {_line(root)}: `nodes` is required",
        "list the nodes, or a Slurm cluster under `clusters:` (see docs/inventory.md)",
    )


def _refuse_duplicate_names(inventory: Inventory, root: yaml.MappingNode, source: str) -> None:
    """Nodes and clusters share one namespace: the fleet shows them side by side."""
    seen: dict[str, str] = {}
    entries = [("nodes", index, node.name) for index, node in enumerate(inventory.nodes)]
    entries += [
        ("clusters", index, cluster.name) for index, cluster in enumerate(inventory.clusters)
    ]
    for kind, index, name in entries:
        if name in seen:
            line = _line(_node_at(root, (kind, index, "name")))
            if seen[name] == kind == "nodes":
                what, fix = "two nodes are named", "give every node its own name"
            elif seen[name] == kind:
                what, fix = "two clusters are named", "give every cluster its own name"
            else:
                what, fix = "a node and a cluster are both named", "give each its own name"
            raise BadInput(f"{source}: line {line}: {what} {name!r}", fix)
        seen[name] = kind


def _local_path(path: str, folder: Path) -> str:
    expanded = Path(path).expanduser()
    return str(expanded if expanded.is_absolute() else folder / expanded)


def _with_local_paths(inventory: Inventory, folder: Path) -> Inventory:
    """Identity files and known_hosts live on this machine: make their paths absolute."""
    defaults = inventory.defaults
    if defaults.identity_file:
        defaults = defaults.model_copy(
            update={"identity_file": _local_path(defaults.identity_file, folder)}
        )
    nodes = tuple(
        node.model_copy(update={"identity_file": _local_path(node.identity_file, folder)})
        if node.identity_file
        else node
        for node in inventory.nodes
    )
    return inventory.model_copy(
        update={
            "defaults": defaults,
            "nodes": nodes,
            "known_hosts": _local_path(inventory.known_hosts, folder),
        }
    )


def _check_identity_files(inventory: Inventory, root: yaml.MappingNode, source: str) -> None:
    places: list[tuple[tuple[Any, ...], str]] = []
    if inventory.defaults.identity_file:
        places.append((("defaults", "identity_file"), inventory.defaults.identity_file))
    for index, node in enumerate(inventory.nodes):
        if node.identity_file:
            places.append((("nodes", index, "identity_file"), node.identity_file))
    for loc, path in places:
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            line = _line(_node_at(root, loc))
            raise BadInput(
                f"{source}: line {line}: the identity file {path} cannot be read "
                f"({exc.strerror or exc})",
                "point identity_file at a private key this user can read",
            ) from None

"""The dependency rule of ARCHITECTURE.md, enforced in fresh interpreters.

Each package is imported module by module in one fresh interpreter, which
reports what every import added to `sys.modules`; the first module that pulls
in something forbidden is named.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import llmgw_agent
import llmgw_core
import llmgw_tui

REPO_ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import importlib, json, sys
added = {}
for name in json.loads(sys.argv[1]):
    before = set(sys.modules)
    importlib.import_module(name)
    added[name] = sorted(set(sys.modules) - before)
print(json.dumps(added))
"""


def _added_by_each(modules: list[str], *python_flags: str, path: str | None = None) -> dict:
    code = (f"import sys; sys.path.insert(0, {path!r})\n" if path else "") + _PROBE
    out = subprocess.run(
        [sys.executable, *python_flags, "-c", code, json.dumps(modules)],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return json.loads(out.stdout)


def _modules(package) -> list[str]:
    prefix = package.__name__ + "."
    return [package.__name__] + [
        info.name for info in pkgutil.walk_packages(package.__path__, prefix=prefix)
    ]


def test_the_core_never_imports_textual():
    for module, added in _added_by_each(_modules(llmgw_core)).items():
        assert not any(m == "textual" or m.startswith("textual.") for m in added), module
        assert not any(m.startswith("llmgw_tui") for m in added), module


def test_the_agent_imports_only_the_standard_library():
    names = [*_modules(llmgw_agent), "llmgw_agent.__main__"]
    stdlib = set(sys.stdlib_module_names) | {"llmgw_agent", "pynvml", "__main__"}
    added = _added_by_each(names, "-S", path=str(REPO_ROOT / "agent"))
    for module, loaded in added.items():
        foreign = {m.split(".")[0] for m in loaded} - stdlib
        foreign = {m for m in foreign if not m.startswith("_")}
        assert not foreign, f"{module} pulls in {sorted(foreign)}"
        assert not any(m.startswith("llmgw_core") for m in loaded), module


# The core's layers, lowest first: a module may import its own layer and those
# below it, never one above. Packages outside this line (engines, fleet,
# fabric, catalog, views) are checked by the rules after it.
LAYERS = ("model", "memory", "planner", "placement", "serve", "gateway", "service", "script")
NEVER_IMPORTS = {
    "engines": {"planner", "placement", "serve", "gateway", "service", "script", "views"},
    "fleet": {"planner", "placement", "serve", "gateway", "service", "script", "views"},
    "fabric": {"planner", "placement", "serve", "gateway", "service", "script", "views"},
    "catalog": {"planner", "placement", "serve", "gateway", "service", "script", "views"},
    "views": {"script"},
    "metrics": {"script"},
}
CORE_ROOT = Path(llmgw_core.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "llmgw_core":
                names = [f"llmgw_core.{alias.name}" for alias in node.names]
        found |= set(names)
    return found


def _core_imports(path: Path) -> set[str]:
    """The core packages (`llmgw_core.X`) a file imports."""
    return {n.split(".")[1] for n in _imports(path) if n.startswith("llmgw_core.")}


def _package_of(path: Path) -> str:
    rel = path.relative_to(CORE_ROOT)
    return rel.parts[0].removesuffix(".py")


def test_the_core_layers_import_only_downwards():
    broken = []
    for path in sorted(CORE_ROOT.rglob("*.py")):
        own = _package_of(path)
        imported = _core_imports(path)
        if own in LAYERS:
            above = set(LAYERS[LAYERS.index(own) + 1 :])
            broken += [f"{path.relative_to(CORE_ROOT)} imports {x}" for x in imported & above]
        broken += [
            f"{path.relative_to(CORE_ROOT)} imports {x}"
            for x in imported & NEVER_IMPORTS.get(own, set())
        ]
    assert not broken, broken


def test_nothing_in_the_core_imports_the_console():
    for path in CORE_ROOT.rglob("*.py"):
        assert not {n for n in _imports(path) if n.split(".")[0] in ("llmgw_tui", "textual")}, path


AGENT_ROOT = REPO_ROOT / "agent" / "llmgw_agent"


def _module_name(path: Path, root: Path, package: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts])


def _is_type_checking(test) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    import ast

    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_graph(root: Path, package: str, *, type_checker: bool = True) -> dict[str, set[str]]:
    """Each module of a package → the package's modules it imports (function level too).

    `from P import X` counts as importing `P.X` where X is a module, else `P`.
    The type checker's graph (the default) counts the imports under `if
    TYPE_CHECKING:` too; the run-time graph (`type_checker=False`) leaves them out.
    """
    import ast

    paths = {_module_name(p, root, package): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        found: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        type_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and _is_type_checking(block.test)
            for statement in block.body
            for node in ast.walk(statement)
        }
        for node in ast.walk(tree):
            if not type_checker and id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in paths else node.module)
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import one another, directly or round a loop (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return groups


def test_a_circle_of_imports_is_found_even_inside_functions():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_an_import_under_type_checking_closes_a_circle_for_the_type_checker_only(tmp_path):
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
    )
    (tmp_path / "b.py").write_text("def b():\n    import pkg.a\n")
    assert _circles(_import_graph(tmp_path, "pkg")) == [["pkg.a", "pkg.b"]]
    assert _circles(_import_graph(tmp_path, "pkg", type_checker=False)) == []


CONSOLE_ROOT = Path(llmgw_tui.__file__).parent
PACKAGES = {"llmgw_agent": AGENT_ROOT, "llmgw_core": CORE_ROOT, "llmgw_tui": CONSOLE_ROOT}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_two_modules_of_a_package_import_each_other(package):
    assert _circles(_import_graph(PACKAGES[package], package, type_checker=False)) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_two_modules_of_a_package_import_each_other_even_for_the_type_checker(package):
    """A circle that exists only under `if TYPE_CHECKING:` still ties every module in it
    to every other: a screen that names the app's class depends on all the app imports."""
    assert _circles(_import_graph(PACKAGES[package], package)) == []


CONSOLE_ENTRY_POINTS = {"llmgw_tui.cli", "llmgw_tui.screenshots"}
"""The modules that build the app; every other module reaches it through `ConsoleApp`."""


def test_only_the_entry_points_import_the_app():
    graph = _import_graph(CONSOLE_ROOT, "llmgw_tui")
    assert set(graph) >= CONSOLE_ENTRY_POINTS, "an entry point is gone"
    importers = {module for module, imports in graph.items() if "llmgw_tui.app" in imports}
    assert importers <= CONSOLE_ENTRY_POINTS


# The agent's packages: what each holds, and what it must not reach into.
AGENT_NEVER_IMPORTS = {
    "discover": {"shards", "sim"},  # facts come from the machine (or its captures), not from us
    "fabric": {"shards", "sim"},  # a fabric test runs tools; it starts no shard
    "shards": {"fabric"},  # a shard runs whatever its spec says (the sim engine included)
    "sim": {"shards", "fabric"},  # simulated hardware and engine sit below the agent's ops
}


def _subpackage(module: str, package: str) -> str | None:
    """`llmgw_agent.fabric.run` → `fabric`; a module at the package's top → None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == package else None


def test_the_agents_packages_keep_to_their_own():
    graph = _import_graph(AGENT_ROOT, "llmgw_agent")
    assert {_subpackage(m, "llmgw_agent") for m in graph} >= set(AGENT_NEVER_IMPORTS), (
        "a package of the rule is gone"
    )
    broken = [
        f"{module} imports {imported}"
        for module, imports in graph.items()
        for imported in imports
        if _subpackage(imported, "llmgw_agent")
        in AGENT_NEVER_IMPORTS.get(_subpackage(module, "llmgw_agent") or "", set())
    ]
    assert not broken, broken


FLEET_OPENS_THE_DEMO = {"llmgw_core.fleet.session"}
"""The one fleet module that may start the simulated fleet: it opens a fleet for a face."""


def test_the_fleets_transport_never_reaches_into_the_simulated_fleet():
    graph = _import_graph(CORE_ROOT, "llmgw_core")
    assert any(m.startswith("llmgw_core.fleet.sim.") for m in graph)
    broken = [
        f"{module} imports {imported}"
        for module, imports in graph.items()
        if module.startswith("llmgw_core.fleet.")
        and not module.startswith("llmgw_core.fleet.sim")
        and module not in FLEET_OPENS_THE_DEMO
        for imported in imports
        if imported.startswith("llmgw_core.fleet.sim")
    ]
    assert not broken, broken

"""Reading YAML an operator wrote (scripts, inventories): bounded, and every mistake one sentence.

Three things PyYAML lets through and we do not: a file too large to be a
hand-written script (a 50 MB paste takes minutes to compose), aliases that
expand into billions of values (an "alias bomb" walks fine as shared
references, then hangs whatever validates it), and a key given twice (YAML
keeps the last silently, so the operator's first value vanishes).
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

import yaml

from llmgw_core.errors import BadInput

MAX_TEXT_BYTES = 1024 * 1024
"""The largest script or inventory read: hand-written files are kilobytes."""

MAX_EXPANDED_VALUES = 100_000
"""The most values a document may hold once its aliases are expanded."""


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it (its wheels are): about ten times faster
than the pure-Python one on an inventory."""

MAX_BRACKET_DEPTH = 64
_BRACKET = re.compile(r"[\[\]{}]")


def read_text_file(path: Path, source: str) -> str:
    """A script's or inventory's text, read at most `MAX_TEXT_BYTES` (a pipe is refused, not waited on).

    Raises:
        BadInput: not a regular file, too large, not UTF-8; OSError as it comes.
    """
    if path.is_dir():
        raise BadInput(f"{source} is a directory", "give a YAML file")
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        raise BadInput(f"{source} is not a regular file (a pipe or a device)", "give a YAML file")
    with path.open("rb") as handle:
        return decode_text(handle.read(MAX_TEXT_BYTES + 1), source)


def decode_text(raw: bytes, source: str) -> str:
    """A file's bytes as text, refused when too large or not UTF-8.

    Raises:
        BadInput: naming the file and what is wrong with it.
    """
    if len(raw) > MAX_TEXT_BYTES:
        raise BadInput(
            f"{source} is larger than the {MAX_TEXT_BYTES // 1024**2} MB "
            "a script or inventory may be",
            "give the YAML file you wrote, not data",
        )
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise BadInput(f"{source} is UTF-16 text", "save it as UTF-8")
    if b"\x00" in raw:
        raise BadInput(f"{source} holds NUL bytes: it is binary, not YAML")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(
            f"{source} is not UTF-8 text (byte {exc.start} cannot be read)",
            "give a YAML text file",
        ) from None


def line_of(node: yaml.Node) -> int:
    """The 1-based line a YAML node starts on."""
    return node.start_mark.line + 1


def yaml_problem(exc: yaml.YAMLError) -> str:
    """`line 3: not valid YAML (…)` for a parse error."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}: " if mark else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return f"{where}not valid YAML ({problem})"


def compose_checked(text: str, source: str) -> yaml.Node | None:
    """The document's node tree, refused when it is not YAML, explodes, or repeats a key.

    Raises:
        BadInput: naming the file, the line and what is wrong.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise BadInput(
            f"{source} is over the {MAX_TEXT_BYTES // 1024**2} MB a script or inventory may be",
            "give the YAML file you wrote, not data",
        )
    _refuse_deep_brackets(text, source)
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise BadInput(f"{source}: {yaml_problem(exc)}") from None
    except RecursionError:
        raise BadInput(f"{source}: nested too deeply to be a script or inventory") from None
    if root is not None:
        _refuse_explosion(root, source)
        _refuse_duplicate_keys(root, source, set())
    return root


def load_checked(text: str, source: str) -> tuple[yaml.Node | None, object]:
    """The node tree (for line numbers) and the loaded value, both checked.

    Raises:
        BadInput: as `compose_checked`, or a value YAML cannot build safely.
    """
    root = compose_checked(text, source)
    if root is None:
        return None, None
    loader = _LOADER("")
    try:
        return root, loader.construct_document(root)  # the tree already parsed, not the text again
    except yaml.YAMLError as exc:
        raise BadInput(f"{source}: {yaml_problem(exc)}") from None
    except RecursionError:
        raise BadInput(f"{source}: nested too deeply to be a script or inventory") from None
    finally:
        loader.dispose()


def _refuse_deep_brackets(text: str, source: str) -> None:
    """Refuse `[[[[…` before PyYAML sees it: its scanner takes seconds per thousand levels.

    Brackets inside quoted strings count too; no hand-written file nests 64 deep.
    """
    depth = 0
    for match in _BRACKET.finditer(text):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_BRACKET_DEPTH:
            line = text.count("\n", 0, match.start()) + 1
            raise BadInput(f"{source}: line {line}: nested too deeply to be a script or inventory")


def _refuse_explosion(root: yaml.Node, source: str) -> None:
    """Count values as if every alias were copied; shared nodes are counted once per use."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            raise BadInput(f"{source}: line {line_of(node)}: an alias refers to itself")
        on_path.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        on_path.discard(key)
        sizes[key] = total
        if total > MAX_EXPANDED_VALUES:
            raise BadInput(
                f"{source}: line {line_of(node)}: its aliases expand to more than "
                f"{MAX_EXPANDED_VALUES:,} values",
                "write the values out, or use fewer nested aliases",
            )
        return total

    try:
        size(root)
    except RecursionError:
        raise BadInput(f"{source}: nested too deeply to be a script or inventory") from None


def _refuse_duplicate_keys(node: yaml.Node, source: str, seen_nodes: set[int]) -> None:
    """YAML keeps the last of two equal keys silently; we refuse them."""
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen and key.value != "<<":
                    raise BadInput(f"{source}: line {line_of(key)}: {key.value!r} is given twice")
                seen.add(key.value)
            _refuse_duplicate_keys(value, source, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicate_keys(item, source, seen_nodes)

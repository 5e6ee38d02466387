"""Where a problem sits in a realm document: YAML nodes with their line and column, YAML syntax
errors as plain sentences, and "did you mean" for an unknown key. `realm.model.parse_realm`
uses them; nothing here knows the realm's models except through the root model it is given.
"""

from __future__ import annotations

import difflib
import typing
from typing import Any

import yaml
from pydantic import BaseModel

__all__ = ["Path", "UniqueKeyLoader", "locate", "path_text", "positions", "unknown_key", "yaml_problem"]

Path = tuple[Any, ...]


def positions(node: yaml.Node, path: Path, out: dict[Path, tuple[int, int]]) -> None:
    """Record the line and column of every node under `node` (keys too, as path + (key, "__key__"))."""
    out[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            # Point a field at its key, where the operator looks for it.
            out[path + (key, "__key__")] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            positions(value_node, path + (key,), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            positions(item, path + (i,), out)


def locate(known: dict[Path, tuple[int, int]], loc: Path) -> tuple[int, int]:
    """The line and column of the node at `loc`, else of its nearest ancestor."""
    loc = tuple(loc)
    for n in range(len(loc), -1, -1):
        prefix = loc[:n]
        if n == len(loc) and prefix + ("__key__",) in known:
            return known[prefix + ("__key__",)]
        if prefix in known:
            return known[prefix]
    return (1, 1)


def path_text(loc: Path) -> str:
    """A location as the operator writes it: clusters[0].members."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


class UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key given twice in one mapping."""


def _check_unique(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _check_unique)  # type: ignore[arg-type]


def yaml_problem(exc: yaml.MarkedYAMLError, text: str) -> tuple[int, int, str]:
    """Line, column and a plain sentence for a YAML syntax error (the parser's own words, which
    speak of tokens and block ends, only when no sentence fits)."""
    mark, start = exc.problem_mark or exc.context_mark, exc.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    problem, context = exc.problem or str(exc), exc.context or ""
    opened = f"line {start.line + 1}, column {start.column + 1}" if start else "above"
    if problem.startswith("expected <block end>"):
        return line, col, ("the indentation is wrong: this line lines up with no level above it (the keys of one "
                           "mapping, and the items of one list, start in one column; indent with spaces)")
    if problem == "mapping values are not allowed here":
        at = text.splitlines()[line - 1] if 0 < line <= len(text.splitlines()) else ""
        return line, len(at) - len(at.lstrip(" ")) + 1, ("a key is not allowed here: this line is indented deeper "
                                                         "than the key above it, or a value holds ': ' and needs "
                                                         "quotes")
    if "'\\t'" in problem:
        return line, col, "a tab character: YAML indents with spaces only"
    if problem == "could not find expected ':'" and start:
        return start.line + 1, start.column + 1, "this key has no ':' (write 'key: value')"
    if context in ("while parsing a flow sequence", "while parsing a flow mapping"):
        what, closing = ("list", "]") if "sequence" in context else ("mapping", "}")
        return line, col, f"the {what} opened at {opened} is not closed with '{closing}'"
    if context == "while parsing a flow node" and "<stream end>" in problem:
        return line, col, "the document ends inside a '[' list or '{' mapping that is not closed"
    if context.startswith("while scanning a quoted scalar"):
        return line, col, f"the quoted value that starts at {opened} is not closed"
    if problem.startswith("duplicate key"):
        return line, col, problem
    return line, col, f"the YAML cannot be read here: {problem}" + (f" ({context} at {opened})" if start else "")


def _known_keys(root: type[BaseModel], loc: Path) -> list[str]:
    """The keys the models accept in the mapping at `loc` (`root` itself for ())."""
    model: Any = root
    for part in (p for p in loc if not isinstance(p, int)):
        field = model.model_fields.get(part) if model else None
        kinds = [field.annotation, *typing.get_args(field.annotation)] if field else []
        model = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
    return list(model.model_fields) if model else []


def unknown_key(root: type[BaseModel], loc: Path) -> str:
    """An unknown key's problem, with the closest key the mapping accepts if one is close."""
    close = difflib.get_close_matches(str(loc[-1]), _known_keys(root, loc[:-1]), n=1, cutoff=0.8)
    return f"unknown key {loc[-1]!r}" + (f"; did you mean {close[0]!r}?" if close else "")

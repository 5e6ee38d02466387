"""The package's layers hold: no import circle between modules, gRPC only in the adapters, and no
module so long that a newcomer cannot find their way in it without being told why.

Read from the source with `ast` (nothing is imported), so a circle that only shows when two
modules happen to be imported in a particular order is caught too. Imports under
`if TYPE_CHECKING:` do not count: they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "services" / "strongroom"

GRPC_ADAPTERS = {
    # gRPC servicers, servers and the peer transport of the persistence member.
    "strongroom.persistence.servicer",
    "strongroom.persistence.map_servicer",
    "strongroom.persistence.admin_servicer",
    "strongroom.persistence.server",
    "strongroom.persistence.generations",
    # Wrapping a method handler's behaviour (the server interceptors' tool).
    "strongroom.handlers",
    "strongroom.persistence.transport",
    # A shared store's standby: its check of the standard and its answers while it does not serve.
    "strongroom.persistence.standby_server",
    # A store migration's unload and load instances (their handshake, transfer and summary).
    "strongroom.persistence.migration_server",
    # The units-of-work servicer.
    "strongroom.uow.servicer",
    # The realm service's servicer and server.
    "strongroom.realm.service",
    # The router's servicer, server and router-to-router transport.
    "strongroom.routing.servicer",
    "strongroom.routing.server",
    "strongroom.routing.transport",
    # The DR service's server and its calls to the primary's members and the standby leader.
    "strongroom.dr.server",
    "strongroom.dr.transport",
    # Server reflection (v1 and v1alpha) that both servers serve.
    "strongroom.reflection",
    # The error table at the gRPC boundary, and the etcd client (etcd speaks gRPC).
    "strongroom.grpcerrors",
    "strongroom.etcd",
    # Where every channel is opened and every port bound, the TLS credentials they use, and the
    # servicers' check of who calls.
    "strongroom.channels",
    "strongroom.security.tls",
    "strongroom.security.calls",
    "strongroom.security.guard",
    # The chart's exec probe: a gRPC health call over mutual TLS.
    "strongroom.probe",
}
"""Modules outside the client side that may import grpc."""
GRPC_PACKAGES = ("strongroom.api", "strongroom.client", "strongroom.cli", "strongroom.local", "strongroom.chaos",
                 "strongroom.drill", "strongroom.drill_k8s", "strongroom.drill_dr", "strongroom.drill_dr_k8s")
"""Packages (and modules) on the client side of the API, which speak gRPC by nature."""

LONG_FILE = 600
LONG_FILE_REASON = "Longer than 600 lines:"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py") if "api" not in p.relative_to(PACKAGE).parts[:1]}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, name: str) -> set[str]:
    """Every module `path` imports (absolute names), outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m in _imports(path, name) if m in modules and m != name} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_walk_sees_the_package() -> None:
    graph = _graph()
    assert "strongroom.persistence.node" in graph and "strongroom.persistence.term" in graph["strongroom.persistence.node"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_between_modules() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "modules that import each other (directly or around a circle): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def _speaks_grpc(name: str) -> bool:
    return name in GRPC_ADAPTERS or any(name == p or name.startswith(p + ".") for p in GRPC_PACKAGES)


def test_grpc_stays_out_of_the_domain() -> None:
    offenders = {}
    for name, path in _modules().items():
        if _speaks_grpc(name):
            continue
        grpc = sorted(m for m in _imports(path, name)
                      if m == "grpc" or m.startswith(("grpc.", "grpc_")) or m.endswith("_pb2_grpc"))
        if grpc:
            offenders[name] = grpc
    assert not offenders, f"domain modules importing gRPC: {offenders}"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_long_module_says_why_at_its_top(path: Path) -> None:
    if "api" in path.relative_to(PACKAGE).parts[:1]:
        return  # generated
    lines = path.read_text().splitlines()
    if len(lines) <= LONG_FILE:
        return
    head = "\n".join(lines[:40])
    assert LONG_FILE_REASON in head, (
        f"{path.relative_to(PACKAGE)} has {len(lines)} lines; split it, or say why it is one module in its "
        f"first lines ('{LONG_FILE_REASON} ...')")

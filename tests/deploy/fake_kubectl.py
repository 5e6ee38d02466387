"""A stand-in for kubectl over pods made from the rendered chart, for the drill tests.

State (JSON, file named by env FAKE_KUBE_STATE): {"pods": [...], "log": path}. It understands the
subset of kubectl the drills use: `get pods --selector S [--field-selector status.phase=Running]`,
`get pod NAME`, with `--output json` or `--output jsonpath=...`; `delete pod NAME` (the StatefulSet
recreates the pod with a new uid and the next member labels itself leader, as the real members
do); `exec -i POD --container C -- python -m strongroom.drill_k8s agent ...` (a scripted agent that
speaks the drill protocol). Every call is appended to the log as a JSON argv list.
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from typing import Any

ROLE = "strongroom.io/role"


def _load() -> dict[str, Any]:
    with open(os.environ["FAKE_KUBE_STATE"]) as f:
        state: dict[str, Any] = json.load(f)
    return state


def _save(state: dict[str, Any]) -> None:
    with open(os.environ["FAKE_KUBE_STATE"], "w") as f:
        json.dump(state, f)


def selects(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based selector "k=v,k2=v2"."""
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def jsonpath(expr: str, data: Any) -> str:
    """The `{.a.b[*].c}` / `{.items[0].x}` subset of kubectl's JSONPath."""
    nodes = [data]
    for token in re.findall(r"\.([A-Za-z0-9_]+)((?:\[[^\]]+\])*)", expr.strip("{}")):
        name, indexes = token
        nodes = [n.get(name) for n in nodes if isinstance(n, dict) and n.get(name) is not None]
        for index in re.findall(r"\[([^\]]+)\]", indexes):
            if index == "*":
                nodes = [x for n in nodes for x in n]
            else:
                nodes = [n[int(index)] for n in nodes if len(n) > int(index)]
    return " ".join(str(n) for n in nodes)


def _option(argv: list[str], *names: str) -> str | None:
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def _output(argv: list[str], data: Any) -> None:
    fmt = _option(argv, "--output", "-o") or ""
    if fmt == "json":
        print(json.dumps(data))
    elif fmt.startswith("jsonpath="):
        print(jsonpath(fmt[len("jsonpath="):], data), end="")
    else:
        raise SystemExit(f"fake kubectl: unsupported output {fmt!r}")


def _agent(argv: list[str]) -> int:
    messages = int(_option(argv, "--messages") or "0")
    print("Defaulted container noise that is not JSON", flush=True)  # the drills must skip it
    print(json.dumps({"event": "half", "confirmed": messages // 2, "next_index": messages // 2}), flush=True)
    line = sys.stdin.readline().strip()
    ok = line == "killed"
    print(json.dumps({"event": "report", "confirmed": messages if ok else messages // 2,
                      "received": messages if ok else 0, "lost": 0, "duplicated": 0, "out_of_order": 0,
                      "publish_gap_seconds": 0.4, "publish_errors": 0, "data_ok": ok,
                      "heard": line}), flush=True)
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    state = _load()
    with open(state["log"], "a") as log:
        log.write(json.dumps(argv) + "\n")
    namespace = _option(argv, "--namespace", "-n") or "default"
    rest = [a for i, a in enumerate(argv) if a not in ("--namespace",) and (i == 0 or argv[i - 1] != "--namespace")]
    pods = [p for p in state["pods"] if p["metadata"]["namespace"] == namespace]
    verb = rest[0]
    if verb == "get" and rest[1] == "pods":
        selector = _option(rest, "--selector", "-l") or ""
        field = _option(rest, "--field-selector") or ""
        items = [p for p in pods if selects(selector, p["metadata"]["labels"])]
        if field == "status.phase=Running":
            items = [p for p in items if p["status"]["phase"] == "Running"]
        _output(rest, {"apiVersion": "v1", "kind": "List", "items": items})
        return 0
    if verb == "get" and rest[1] == "pod":
        pod = next((p for p in pods if p["metadata"]["name"] == rest[2]), None)
        if pod is None:
            print(f'Error from server (NotFound): pods "{rest[2]}" not found', file=sys.stderr)
            return 1
        _output(rest, pod)
        return 0
    if verb == "delete" and rest[1] == "pod":
        name = rest[2]
        pod = next(p for p in pods if p["metadata"]["name"] == name)
        was_leader = pod["metadata"]["labels"].pop(ROLE, None) is not None
        pod["metadata"]["uid"] = str(uuid.uuid4())  # the StatefulSet's replacement pod
        if was_leader:
            peers = [p for p in pods if p["metadata"]["name"] != name and all(
                p["metadata"]["labels"].get(k) == v for k, v in pod["metadata"]["labels"].items()
                if k in ("app.kubernetes.io/instance", "strongroom.io/cluster"))]
            peers[0]["metadata"]["labels"][ROLE] = "leader"
        _save(state)
        print(f'pod "{name}" deleted')
        return 0
    if verb == "exec":
        pod = next((p for p in pods if p["metadata"]["name"] == rest[2]), None)
        container = _option(rest, "--container", "-c")
        if pod is None or container not in [c["name"] for c in pod["spec"]["containers"]]:
            print(f"error: no container {container} in pod {rest[2]}", file=sys.stderr)
            return 1
        command = rest[rest.index("--") + 1:]
        if command[:4] == ["python", "-m", "strongroom.drill_k8s", "agent"]:
            return _agent(command)
    print(f"fake kubectl: unsupported {argv}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

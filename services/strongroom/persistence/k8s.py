"""The leader labels its own pod, so a Kubernetes Service can select the leader alone.

When the member starts serving as leader it patches its pod with `strongroom.io/role=leader`;
when it stops it removes the label. The Helm chart's leader Service selects that label, and the
chart's Role allows exactly `get` and `patch` on the members' pods. The active replica of a
cluster's router labels its pod the same way, `strongroom.io/role=active` (`ACTIVE_VALUE`;
routing/main.py installs it), and the chart's router Service selects that; the router's Role
allows `get` and `patch` on pods of the release's namespace.

The pod is found from the downward API (env POD_NAME, POD_NAMESPACE, set by the chart); the API
server and credentials from the pod's service account, as `kubernetes.config.load_incluster_config`
reads them. Outside a pod (no POD_NAME) nothing is registered and the member runs as before.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "ACTIVE_VALUE",
    "LEADER_VALUE",
    "MERGE_PATCH",
    "ROLE_LABEL",
    "LeaderLabel",
    "PodIdentity",
    "in_cluster_api",
    "install_leader_label",
    "patch_body",
    "pod_identity",
]

log = logging.getLogger("strongroom.k8s")

ROLE_LABEL = "strongroom.io/role"
"""The pod label a leader (or the active router replica) sets on itself; the chart's leader
Service (router Service) selects it (_helpers.tpl)."""
LEADER_VALUE = "leader"
"""The label's value on the leader's pod; other pods carry no such label."""
ACTIVE_VALUE = "active"
"""The label's value on the active router replica's pod; the chart's router Service selects it
(_helpers.tpl), standby replicas carry no such label."""
MERGE_PATCH = "application/merge-patch+json"
"""A JSON merge patch: a null value removes the label. The client's own default content type for
a pod patch is json-patch+json, which the API server rejects for an object body."""

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
RETRIES = 5
RETRY_DELAY_SECONDS = 0.5
REQUEST_TIMEOUT_SECONDS = 5.0  # a hung API call must not hold back the next leadership change


class _Leadership(Protocol):
    """The part of `PersistenceNode` (and of the router's `Router`) the label needs (kept narrow
    so tests need no node)."""

    leadership_listeners: list[Callable[[bool], Awaitable[None]]]


@dataclass(frozen=True)
class PodIdentity:
    """The pod this process (a member, a router replica) runs in."""

    namespace: str
    name: str


def pod_identity(environ: Mapping[str, str] = os.environ) -> PodIdentity | None:
    """The pod from the downward API env (POD_NAME, POD_NAMESPACE), or None outside Kubernetes."""
    name = environ.get("POD_NAME", "").strip()
    namespace = environ.get("POD_NAMESPACE", "").strip()
    if not name or not namespace:
        return None
    return PodIdentity(namespace=namespace, name=name)


def patch_body(leading: bool, value: str = LEADER_VALUE) -> dict[str, Any]:
    """The merge patch that sets the role label to `value` (leading) or removes it (not leading)."""
    return {"metadata": {"labels": {ROLE_LABEL: value if leading else None}}}


def in_cluster_api(token_file: Path | None = None, ca_file: Path | None = None,
                   environ: Mapping[str, str] = os.environ) -> Any:
    """A `CoreV1Api` configured from the pod's service account (token, CA, KUBERNETES_SERVICE_*).

    The paths and environment can be pointed elsewhere (tests); the token is re-read from its
    file as the client's in-cluster loader does, so a rotated projected token keeps working.
    """
    from kubernetes import client
    from kubernetes.config.incluster_config import InClusterConfigLoader

    configuration = client.Configuration()
    loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]  # the client ships no types here
        token_filename=str(token_file or SERVICE_ACCOUNT_DIR / "token"),
        cert_filename=str(ca_file or SERVICE_ACCOUNT_DIR / "ca.crt"),
        environ=dict(environ),
    )
    loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    # A leader change must not hang on an unreachable API server; the retry loop covers blips.
    configuration.retries = 0
    return client.CoreV1Api(client.ApiClient(configuration))


class LeaderLabel:
    """A leadership listener that keeps the role label of its pod in step with the member (or
    the router replica): `ROLE_LABEL=value` while leading, no such label otherwise.

    Calls are serialised and only the latest wish is applied: a True that a False overtook is
    dropped. A failed patch is retried a few times, then logged (the member keeps serving; only
    the Service selecting the label is stale until the next change).
    """

    def __init__(self, api: Any, pod: PodIdentity, retries: int = RETRIES,
                 retry_delay: float = RETRY_DELAY_SECONDS, value: str = LEADER_VALUE) -> None:
        self.api = api
        self.pod = pod
        self.value = value
        """The label's value while leading (LEADER_VALUE for a member, ACTIVE_VALUE for a router)."""
        self.retries = retries
        self.retry_delay = retry_delay
        self._wanted: bool | None = None
        self._lock = asyncio.Lock()
        self.reset_task: asyncio.Task[None] | None = None
        """The startup clear, kept referenced so it is not collected before it ran."""

    async def __call__(self, leading: bool) -> None:
        """Set the label when `leading`, remove it otherwise."""
        self._wanted = leading
        await self._apply(leading)

    def reset(self) -> asyncio.Task[None]:
        """Remove the label in the background; a leadership change made meanwhile wins."""
        self._wanted = False  # now, not when the task first runs: a True may come before that
        return asyncio.get_running_loop().create_task(self._apply(False), name="leader-label-reset")

    async def _apply(self, leading: bool) -> None:
        async with self._lock:
            for attempt in range(1, self.retries + 1):
                if self._wanted != leading:
                    return  # a later call wants the other state; it applies that itself
                try:
                    await asyncio.to_thread(self._patch, leading)
                    log.info("pod %s/%s: %s", self.pod.namespace, self.pod.name,
                             f"labelled {ROLE_LABEL}={self.value}" if leading else f"label {ROLE_LABEL} removed")
                    return
                except Exception as exc:  # noqa: BLE001 - the API server may be briefly unreachable
                    if attempt == self.retries:
                        log.error("cannot %s the label %s=%s of pod %s/%s after %d attempts: %s",
                                  "set" if leading else "remove", ROLE_LABEL, self.value, self.pod.namespace,
                                  self.pod.name, attempt, exc)
                        return
                    log.warning("%s=%s label patch failed (attempt %d): %s", ROLE_LABEL, self.value, attempt, exc)
                    await asyncio.sleep(self.retry_delay * attempt)

    def _patch(self, leading: bool) -> None:
        self.api.patch_namespaced_pod(self.pod.name, self.pod.namespace, patch_body(leading, self.value),
                                      _content_type=MERGE_PATCH, _request_timeout=REQUEST_TIMEOUT_SECONDS)


def install_leader_label(node: _Leadership, environ: Mapping[str, str] = os.environ,
                         api: Any = None, value: str = LEADER_VALUE) -> LeaderLabel | None:
    """Register the pod-label listener on `node` (a member, or a router with `value`
    ACTIVE_VALUE) when running in a pod; else return None.

    The label is cleared once at startup: a container restarted inside the same pod (crash, OOM)
    would otherwise keep the label of a leadership its previous process held.
    """
    pod = pod_identity(environ)
    if pod is None:
        return None
    if api is None:
        try:
            api = in_cluster_api(environ=environ)
        except Exception as exc:  # noqa: BLE001 - the member serves without the label
            log.error("pod %s/%s: no Kubernetes API credentials (%s); the Service selecting %s=%s will "
                      "select no pod", pod.namespace, pod.name, exc, ROLE_LABEL, value)
            return None
    label = LeaderLabel(api, pod, value=value)
    node.leadership_listeners.append(label)
    label.reset_task = label.reset()
    return label

"""Where the cluster is, found as the `strongroom` commands find it when `-s` names nothing: the
`STRONGROOM_ENDPOINTS` environment variable, else every member of the local cluster's state file
(the one `strongroom up` writes)."""

from __future__ import annotations

import os
from pathlib import Path

from strongroom.client.connection import parse_endpoints
from strongroom.errors import InvalidArgument
from strongroom.security.tls import Tls

__all__ = ["ENDPOINTS_ENV", "endpoints_from_environment", "tls_from_environment"]

ENDPOINTS_ENV = "STRONGROOM_ENDPOINTS"
"""The environment variable naming the cluster's members, HOST:PORT,..."""


def endpoints_from_environment(data_dir: str | os.PathLike[str] | None = None, cluster: str | None = None) -> list[str]:
    """The member addresses to give `Client`: `$STRONGROOM_ENDPOINTS` (HOST:PORT,...) when set,
    else every member of the state file of the local cluster in `data_dir` (default:
    `$STRONGROOM_DATA_DIR`, else `./.strongroom`, as for `strongroom up`); only the members of
    `cluster` when given (a realm of several clusters, e.g. the clusters of a routed store).

    Reading the state file, it also makes that deployment's TLS settings this process's
    (`tls_from_environment`), so a `Client` of the addresses it returns can reach them.

    Raises `InvalidArgument` when the variable names no address, or when it is unset and there
    is no state file (no local cluster was started there) or the file lists no member (of
    `cluster`)."""
    # The launcher owns the data dir's default and the state file's format; imported here so
    # that importing the client does not load it.
    from strongroom.local.launcher import default_data_dir, load_state, member_endpoints, state_path

    raw = os.environ.get(ENDPOINTS_ENV)
    if raw:
        named = parse_endpoints(raw)
        if not named:
            raise InvalidArgument(f"${ENDPOINTS_ENV} names no address: {raw!r}")
        return named
    where = Path(data_dir).absolute() if data_dir is not None else default_data_dir()
    state = load_state(where)
    tls_from_environment(where)
    if state is None:
        raise InvalidArgument(f"no endpoints: set {ENDPOINTS_ENV}=HOST:PORT,... or start a local cluster "
                              f"with `strongroom up` (no state file at {state_path(where)})")
    if cluster is not None:
        clusters = state.get("clusters", {})
        if cluster not in clusters:
            raise InvalidArgument(f"the state file {state_path(where)} has no cluster {cluster!r}; its clusters: "
                                  f"{', '.join(clusters) or '(none)'}")
        state = {"clusters": {cluster: clusters[cluster]}}
    endpoints = member_endpoints(state)
    if not endpoints:
        raise InvalidArgument(f"the state file {state_path(where)} lists no members")
    return endpoints


def tls_from_environment(data_dir: str | os.PathLike[str] | None = None) -> Tls | None:
    """The TLS settings a client of this process uses, found as the `strongroom` commands find
    them, and made the process's (`strongroom.security.tls.use`): `$STRONGROOM_TLS_CA`,
    `$STRONGROOM_TLS_CERT` and `$STRONGROOM_TLS_KEY` when set, else the operator's certificate
    the state file of the local deployment in `data_dir` names (none when it runs `--insecure`),
    else none (plaintext). `$STRONGROOM_TOKEN`, when set, becomes the process's bearer token
    (`strongroom.security.tls.use_token`). Raises `InvalidArgument` when the files named cannot
    be read, or a token is set without TLS."""
    from strongroom.local.launcher import default_data_dir, load_state
    from strongroom.security import tls

    try:
        found = tls.from_env()
        if found is None:
            where = Path(data_dir).absolute() if data_dir is not None else default_data_dir()
            state = load_state(where)
            named = state.get("tls") if state is not None else None
            if isinstance(named, dict):
                found = tls.Tls.load(named["ca"], named["cert"], named["key"])
            elif state is not None and "tls" not in state:
                found = tls.current()  # a state file from before TLS: whatever the process has
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidArgument(f"cannot read the TLS settings: {exc}") from None
    tls.use(found)
    token = os.environ.get(tls.TOKEN_ENV, "")
    if token:
        if found is None:
            raise InvalidArgument(f"${tls.TOKEN_ENV} is set but this deployment runs without TLS: a bearer "
                                  f"token is sent over TLS only")
        tls.use_token(token)
    return found

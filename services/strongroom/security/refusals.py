"""Attempts this process refused, counted and logged: the one place every refusal of a
connection or a call for who its caller is goes through.

Counted by where it happened (`grpc`: a gRPC port; `link`: the replication link) and by reason
(`tls_handshake`: no certificate, one of another authority, an expired one, or no TLS at all;
`certificate_revoked`: one the authority's revocation list names, `strongroom.security.revocation`;
`no_identity`, `wrong_identity`, `impersonation`: a certificate of the authority whose holder
may not make the call: `strongroom.security.identity.admits`; `not_granted`: a user of the realm
without the permission the call needs, `token_*`: a bearer token refused, and `no_identity` for a
call that proves no user where the realm enables auth: `strongroom.security.guard`). Exported as
`strongroom_refused_total{where,reason}` by every process that serves metrics.

Every refusal is counted; the log takes the first of each (where, reason) and then at most one
line per LOG_EVERY_SECONDS, which says how many were refused since its last line (the count of a
flood that stopped reaches the log with the next line, and the metric at once): a client
retrying with a wrong certificate, or someone trying tokens, cannot fill the disk with the log.
gRPC's own line for a refused handshake goes through the same rate: the others are dropped from
the standard error they were written to, and counted.

gRPC refuses a failed handshake inside its C core, before any Python code runs: it writes one
line to the process's standard error (`Handshake failed with error ...`). `watch_grpc_handshakes`
reads the process's standard error through a pipe, passes every line on unchanged and counts
those (the gRPC log line says why, not who).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading
import time
from collections import Counter

__all__ = ["HANDSHAKE_LINE", "LOG_EVERY_SECONDS", "REASONS", "count", "pass_on", "snapshot", "watch_grpc_handshakes"]

log = logging.getLogger("strongroom.security")

HANDSHAKE_LINE = re.compile(rb"Handshake failed with (?:fatal )?error ([A-Z_]+): (.*)")
"""What gRPC's core writes for a refused TLS handshake (ssl_transport_security.cc)."""

REASONS = ("tls_handshake", "certificate_revoked", "no_identity", "wrong_identity", "impersonation", "not_granted",
           "token_malformed", "token_unknown", "token_forged", "token_revoked", "token_expired")
"""Every reason a refusal is counted under (each exported, 0 until it happens)."""

LOG_EVERY_SECONDS = 10.0
"""At most one log line per (where, reason) in this many seconds; the counts miss nothing."""

_lock = threading.Lock()
_counts: Counter[tuple[str, str]] = Counter()
_logged_at: dict[tuple[str, str], float] = {}
_unlogged: Counter[tuple[str, str]] = Counter()
_watching = False


def _admit(key: tuple[str, str], now: float) -> int | None:
    """Count one refusal; None when its line is not to be written (one for the same key was,
    less than LOG_EVERY_SECONDS ago), else how many went unwritten before it."""
    with _lock:
        _counts[key] += 1
        last = _logged_at.get(key)
        if last is not None and 0 <= now - last < LOG_EVERY_SECONDS:
            _unlogged[key] += 1
            return None
        _logged_at[key] = now
        return _unlogged.pop(key, 0)


def _more(unlogged: int) -> str:
    return f" ({unlogged} more refused so since the last line)" if unlogged else ""


def count(where: str, reason: str, message: str, peer: object = "", now: float | None = None) -> None:
    """Count one refused attempt and log it (`message` says why, `peer` who or from where),
    unless a line for the same where and reason was written less than LOG_EVERY_SECONDS ago
    (`now`: a monotonic time, the clock's by default)."""
    unlogged = _admit((where, reason), time.monotonic() if now is None else now)
    if unlogged is None:
        return
    more = _more(unlogged)
    log.warning("refused (%s, %s)%s: %s%s", where, reason, f" from {peer}" if peer else "", message, more)


def snapshot() -> dict[tuple[str, str], int]:
    """(where, reason) -> attempts refused since the process started."""
    with _lock:
        return dict(_counts)


def pass_on(lines: list[bytes], now: float) -> list[bytes]:
    """The lines of the standard error to write on, counting the refused handshakes among them:
    every other line, and a handshake's line at the log's rate (with how many went unwritten)."""
    kept = []
    for line in lines:
        if HANDSHAKE_LINE.search(line) is None:
            kept.append(line)
            continue
        unlogged = _admit(("grpc", "tls_handshake"), now)
        if unlogged is not None:
            kept.append(line + _more(unlogged).encode())
    return kept


PARTIAL_LINE_BYTES = 65536
"""A partial line of the standard error longer than this is written on before its end."""


def watch_grpc_handshakes() -> None:
    """Count gRPC's refused handshakes: this process's standard error (file descriptor 2) goes
    through a pipe read by a thread that writes its lines on to where they went before (`pass_on`:
    a refused handshake's at the log's rate) and counts the handshake failures among them.
    Idempotent; call it once at start, before the servers."""
    global _watching
    if _watching:
        return
    _watching = True
    read_end, write_end = os.pipe()
    original = os.dup(2)
    sys.stderr.flush()
    os.dup2(write_end, 2)
    os.close(write_end)

    def write(data: bytes) -> None:
        while data:
            data = data[os.write(original, data):]

    def pump() -> None:
        buffered = b""
        while True:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            out = b"".join(line + b"\n" for line in pass_on(lines, time.monotonic()))
            if len(buffered) > PARTIAL_LINE_BYTES:  # no line end in sight: do not hold it back
                out, buffered = out + buffered, b""
            write(out)
        write(buffered)  # what came last without a line end

    pumping = threading.Thread(target=pump, name="stderr-tap", daemon=True)
    pumping.start()

    def restore() -> None:
        # The last lines a stopping process writes reach its log: fd 2 back to where it was
        # closes the pipe's only writer, and the pump ends once it has passed everything on.
        sys.stderr.flush()
        os.dup2(original, 2)
        pumping.join(timeout=2.0)

    atexit.register(restore)

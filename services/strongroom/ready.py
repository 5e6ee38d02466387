"""The READY line a server process prints once it serves, which the launcher, the tests and the
tools read from its log: `READY <words>`, written whole.

A process's standard output and standard error go to one log file, and with TLS on the standard
error passes through a thread (`strongroom.security.refusals.watch_grpc_handshakes`). `print`
on an unbuffered stream (the launcher sets PYTHONUNBUFFERED) writes the text and its newline
in two writes, between which that thread may write a log line: the READY line then runs into
it (a CI run read `READY dr default 127.0.0.1:37573<a log line>`). One `os.write` of the whole
line cannot be split.
"""

from __future__ import annotations

import os
import sys

__all__ = ["say_ready"]


def say_ready(*words: str) -> None:
    """Write `READY <words>` and its newline to standard output in one write."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (" ".join(("READY", *words)) + "\n").encode())

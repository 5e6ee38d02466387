"""Packet loss and duplication inside TCP connections, on the loopback of a private network
namespace.

iptables rules on `lo`: a random share of packets dropped on INPUT (`statistic --mode random`;
TCP retransmits them after its timeout) and a random share duplicated on the mangle table's
POSTROUTING (`TEE --gateway 127.0.0.1`; the receiver's TCP drops the copies). The streams stay
correct byte streams, as on a lossy network, unlike the proxies' cuts and stalls. Reordering
would need tc's `netem` qdisc, which this machine's kernel lacks (`tc qdisc add dev lo root
netem` answers "Specified qdisc kind is unknown").

Only inside a network namespace of its own: on the host's loopback the rules would hit every
process of the machine. `tests/chaos/test_packet_loss.py` runs the scenario under `unshare -n`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["clear", "impair", "unavailable_reason"]

_TEE = ["-t", "mangle", "-A", "POSTROUTING", "-o", "lo", "-m", "statistic", "--mode", "random"]


def _private_netns() -> bool:
    """Only a loopback in this process's network namespace (what `unshare -n` makes): rules on
    it reach no other process of the machine."""
    try:
        lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    except OSError:
        return False
    return [line.split(":", 1)[0].strip() for line in lines] == ["lo"]


def unavailable_reason() -> str | None:
    """Why packets cannot be impaired here (None: they can)."""
    if shutil.which("iptables") is None:
        return "iptables is not installed (apt-get install iptables)"
    if not _private_netns():
        return "not in a network namespace of its own: run under `unshare -n` (tests/chaos/test_packet_loss.py does)"
    return None


def _iptables(*args: str) -> None:
    subprocess.run(["iptables", *args], check=True, capture_output=True, timeout=20)


def impair(loss: float, duplicate: float) -> None:
    """Drop `loss` and duplicate `duplicate` (shares, 0..1) of the packets on the loopback."""
    clear()
    if loss > 0:
        _iptables("-A", "INPUT", "-i", "lo", "-m", "statistic", "--mode", "random", "--probability", f"{loss:.4f}",
                  "-j", "DROP")
    if duplicate > 0:
        _iptables(*_TEE, "--probability", f"{duplicate:.4f}", "-j", "TEE", "--gateway", "127.0.0.1")


def clear() -> None:
    """No more loss or duplication."""
    _iptables("-F", "INPUT")
    _iptables("-t", "mangle", "-F", "POSTROUTING")

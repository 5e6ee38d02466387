"""The READY line as the launcher, the tests and the tools read it: `READY <words>`, on a line of
its own between the process's other output (strongroom.ready says why it is one write)."""

from __future__ import annotations

import subprocess
import sys


def test_the_ready_line_reads_ready_and_its_words_on_a_line_of_its_own(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Unbuffered, as the launcher runs every server.
    script = ("import sys; from strongroom.ready import say_ready; print('before'); "
              "say_ready('dr', 'default', '127.0.0.1:7600'); print('after')")
    log = tmp_path / "out.log"
    with log.open("ab") as out:
        subprocess.run([sys.executable, "-u", "-c", script], stdout=out, stderr=out, check=True, timeout=30)
    assert log.read_text().splitlines() == ["before", "READY dr default 127.0.0.1:7600", "after"]

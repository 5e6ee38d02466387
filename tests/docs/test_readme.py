"""The README runs as written: its shell and Python blocks, in order, against one real local
cluster, so a README that drifts from the product fails the suite.

Every fenced block of README.md is one of:

- a ```` ```bash ```` (or `sh`, `shell`) block: run by bash with `-e -o pipefail` from the
  repository root, with this interpreter's `bin` first on PATH (as after
  `source .venv/bin/activate`) and `STRONGROOM_DATA_DIR` naming a temporary data dir, so the
  README's own `strongroom up --detach` starts the cluster the later blocks use;
- a ```` ```python ```` block: written to a file and run as a script by this interpreter, in
  the same environment;
- a block right after `<!-- file: PATH -->`: a copy of that file of the repository (the
  README shows it, the commands use it); it must equal the file;
- a block right after `<!-- not run: REASON -->`: skipped, with its reason in the test report
  (Kubernetes, the foreground `make up`, long runs, this suite itself).

A block right after `<!-- run last: REASON -->` runs after every other (the `strongroom down`
that would stop the cluster the later blocks need). A block of any other kind without a marker
fails `test_every_block_is_run_or_marked`, so none escapes by accident. Blocks depend on the
ones before them, as a reader's steps do: run the whole file. A failing block names its line.
Whatever the blocks left running in the data dir is stopped by pid at the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from strongroom.local.launcher import down, live_pids, load_state
from strongroom.local.process import stop_processes

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

RUNNERS = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python"}
"""Fence languages the test runs, and how."""
BLOCK_TIMEOUT = 180.0
"""Seconds one block may take (the slowest, the local failover drill, takes under 10)."""
ENVIRONMENT_OF_OTHERS = ("STRONGROOM_ENDPOINTS", "STRONGROOM_DATA_DIR", "STRONGROOM_REALM", "STRONGROOM_ETCD",
                         "STRONGROOM_TLS_CA", "STRONGROOM_TLS_CERT", "STRONGROOM_TLS_KEY", "STRONGROOM_TOKEN")
"""Variables of the caller's environment that would point the blocks at another cluster, or make
them call as someone else than the state file's operator (user admin), as a reader's shell does."""

_MARKER = re.compile(r"^<!--\s*(?P<kind>not run|run last|file):\s*(?P<text>.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a Markdown file."""

    line: int
    """Line of the opening fence (1-based)."""
    language: str
    """The fence's language ('' for none)."""
    text: str
    not_run: str | None = None
    """Why the block is not run (`<!-- not run: REASON -->`), or None."""
    run_last: bool = False
    """The block runs after every other (`<!-- run last: REASON -->`)."""
    file: str | None = None
    """The repository file the block is a copy of (`<!-- file: PATH -->`), or None."""

    @property
    def where(self) -> str:
        """README.md:LINE, as a test id and in failures."""
        return f"README.md:{self.line}"

    @property
    def runner(self) -> str | None:
        """'bash' or 'python' for a block the test runs, else None."""
        if self.not_run is not None or self.file is not None:
            return None
        return RUNNERS.get(self.language)


def parse_blocks(markdown: str) -> list[Block]:
    """Every fenced block of `markdown` (indented ones too, their indentation removed), with the
    marker on the last non-blank line before it."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(?P<indent> *)(?P<fence>`{3,})\s*(?P<language>[\w+-]*)", lines[i])
        if fence is None:
            i += 1
            continue
        start, end = i, i + 1
        while end < len(lines) and lines[end].strip() != fence.group("fence"):
            end += 1
        if end == len(lines):
            raise ValueError(f"README.md:{start + 1}: the block never closes")
        before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.match(before)
        kind, text = (marker.group("kind"), marker.group("text")) if marker else ("", "")
        if marker and not text:
            raise ValueError(f"README.md:{start + 1}: `<!-- {kind}: -->` before the block needs a reason or a path")
        indent = len(fence.group("indent"))
        body = "\n".join(line[indent:] if line[:indent].strip() == "" else line for line in lines[start + 1:end])
        blocks.append(Block(line=start + 1, language=fence.group("language"), text=body + "\n",
                            not_run=text if kind == "not run" else None, run_last=kind == "run last",
                            file=text if kind == "file" else None))
        i = end + 1
    return blocks


BLOCKS = parse_blocks(README.read_text())
_TESTED = [b for b in BLOCKS if b.not_run is not None or b.runner is not None]
RUN = [b for b in _TESTED if not b.run_last] + [b for b in _TESTED if b.run_last]
"""The blocks of `test_block`, in the order they run (skipped ones where they stand)."""


@dataclass
class Reader:
    """Where the blocks run: their environment, a directory for the Python blocks' scripts, and
    the local cluster's data dir with every state file seen in it."""

    env: dict[str, str]
    scripts: Path
    data_dir: Path
    states: list[dict[str, Any]] = field(default_factory=list)

    def note_state(self) -> None:
        """Remember the processes the data dir's state file lists now (a later `down` removes
        the file before they have all exited)."""
        state = load_state(self.data_dir)
        if state is not None and state not in self.states:
            self.states.append(state)


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    """This interpreter's commands first on PATH and a temporary data dir for the local cluster;
    at the end, every process a state file of it listed that still runs is stopped by pid."""
    data_dir = tmp_path_factory.mktemp("readme-cluster")
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT_OF_OTHERS}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["STRONGROOM_DATA_DIR"] = str(data_dir)
    # Blocks that write scratch files do so under $TMPDIR: one directory per run, so that two
    # runs at once (two checkouts) do not share them.
    env["TMPDIR"] = str(tmp_path_factory.mktemp("readme-tmp"))
    reader = Reader(env, tmp_path_factory.mktemp("readme-scripts"), data_dir)
    try:
        yield reader
    finally:
        reader.note_state()
        if load_state(data_dir) is not None:
            down(data_dir)
        stop_processes(sorted({pid for state in reader.states for _, pid in live_pids(state)}))


def run(block: Block, reader: Reader) -> subprocess.CompletedProcess[str]:
    """Run a block to its end (its process group killed past BLOCK_TIMEOUT)."""
    if block.runner == "python":
        script = reader.scripts / f"readme_{block.line}.py"
        script.write_text(block.text)
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    proc = subprocess.Popen(argv, cwd=ROOT, env=reader.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        reader.note_state()
        pytest.fail(f"{block.where}: the {block.language} block did not finish in {BLOCK_TIMEOUT:g} s\n"
                    f"{_shown(block, out, err)}", pytrace=False)
    reader.note_state()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _shown(block: Block, out: str, err: str) -> str:
    def tail(text: str) -> str:
        return text if len(text) <= 4000 else "...\n" + text[-4000:]

    return f"--- block ---\n{block.text}--- stdout ---\n{tail(out)}--- stderr ---\n{tail(err)}"


@pytest.mark.parametrize("block", RUN, ids=[f"{b.where}-{b.language}" for b in RUN])
def test_block(block: Block, reader: Reader) -> None:
    """Each shell and Python block exits 0, in README order (the skipped ones say why)."""
    if block.not_run is not None:
        pytest.skip(f"{block.where} not run: {block.not_run}")
    result = run(block, reader)
    if result.returncode != 0:
        pytest.fail(f"{block.where}: the {block.language} block failed (exit {result.returncode})\n"
                    f"{_shown(block, result.stdout, result.stderr)}", pytrace=False)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.file], ids=lambda b: f"{b.where}-{b.file}")
def test_file_copies_match(block: Block) -> None:
    """A block that shows a file of the repository shows it as it is."""
    assert block.file is not None
    path = ROOT / block.file
    assert path.is_file(), f"{block.where}: {block.file} does not exist"
    assert block.text == path.read_text(), f"{block.where}: the block differs from {block.file}"


def test_every_block_is_run_or_marked() -> None:
    """No block escapes the test by accident: each is run, a file's copy, or marked not run."""
    unmarked = [f"{b.where} (```{b.language})" for b in BLOCKS
                if b.runner is None and b.not_run is None and b.file is None]
    assert not unmarked, ("blocks neither run nor marked `<!-- not run: REASON -->` or `<!-- file: PATH -->`: "
                          + ", ".join(unmarked))
    assert any(b.runner == "bash" for b in BLOCKS) and any(b.runner == "python" for b in BLOCKS)


def test_markers_are_read() -> None:
    """The parser: fences, languages, lines and the marker before a block."""
    text = ("# T\n\n<!-- not run: needs a cluster -->\n```bash\nkubectl get pods\n```\n\n"
            "<!-- run last: stops it -->\n\n```sh\nstrongroom down\n```\n"
            "<!-- file: a/b.yaml -->\n```yaml\nx: 1\n```\n````\n```python\n````\n```\nplain\n```\n")
    blocks = parse_blocks(text)
    assert [(b.line, b.language, b.not_run, b.run_last, b.file, b.runner) for b in blocks] == [
        (4, "bash", "needs a cluster", False, None, None),
        (10, "sh", None, True, None, "bash"),
        (14, "yaml", None, False, "a/b.yaml", None),
        (17, "", None, False, None, None),
        (20, "", None, False, None, None),
    ]
    assert blocks[0].text == "kubectl get pods\n" and blocks[3].text == "```python\n"
    with pytest.raises(ValueError, match="README.md:1: the block never closes"):
        parse_blocks("```bash\nnever closed\n")

"""Lost un-fsynced writes: a journal of what fsync made durable, and a crash that keeps only that.

A member started with `LD_PRELOAD=<shim>` journals, for every successful `fsync`/`fdatasync` of
a regular file under its data dir, the file's size just before the call (those bytes are durable
once the call returns), and every `rename` into the data dir. RocksDB files are append-only
(WAL, SST, MANIFEST) or replaced by rename (CURRENT, OPTIONS), so after a SIGKILL the image a
machine crash could leave is: every file cut back to its last fsynced size, files never fsynced
removed, renames kept. `simulate_crash` turns the data dir into that image.

The shim is built with the system C compiler; without one the fault is not available.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SHIM_SOURCE", "CrashImage", "build_shim", "shim_env", "simulate_crash", "snapshot_sizes"]

SHIM_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int jfd = -2;
static const char *prefix = NULL;
static size_t plen = 0;

static void init(void) {
    if (jfd != -2) return;
    const char *path = getenv("STRONGROOM_FSYNC_JOURNAL");
    prefix = getenv("STRONGROOM_FSYNC_PREFIX");
    plen = prefix ? strlen(prefix) : 0;
    jfd = path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void emit(const char *line, int len) {
    if (jfd >= 0 && len > 0) { ssize_t r = write(jfd, line, (size_t)len); (void)r; }
}

static long long size_before(int fd, char *path, size_t n) {
    struct stat st;
    char link[64];
    init();
    if (jfd < 0 || !plen || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, path, n - 1);
    if (k <= 0) return -1;
    path[k] = 0;
    if (strncmp(path, prefix, plen) != 0) return -1;
    return (long long)st.st_size;
}

static void note_sync(long long size, const char *path) {
    char line[4400];
    emit(line, snprintf(line, sizeof line, "S %.6f %lld %s\n", now(), size, path));
}

int fsync(int fd) {
    static int (*real)(int) = NULL;
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    char path[4096];
    long long size = size_before(fd, path, sizeof path);
    int r = real(fd);
    if (r == 0 && size >= 0) note_sync(size, path);
    return r;
}

int fdatasync(int fd) {
    static int (*real)(int) = NULL;
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    char path[4096];
    long long size = size_before(fd, path, sizeof path);
    int r = real(fd);
    if (r == 0 && size >= 0) note_sync(size, path);
    return r;
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *) = NULL;
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int r = real(from, to);
    init();
    if (r == 0 && jfd >= 0 && plen && strncmp(to, prefix, plen) == 0) {
        char line[8400];
        emit(line, snprintf(line, sizeof line, "R %.6f %s\t%s\n", now(), from, to));
    }
    return r;
}
"""


def build_shim(out_dir: Path, source: str = SHIM_SOURCE, name: str = "fsync_journal") -> Path | None:
    """Compile a shim (this one by default; `chaos.clockshift`'s too) into `out_dir` as
    `name`.so; None if no C compiler works here."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / f"{name}.c"
    lib = out_dir / f"{name}.so"
    src.write_text(source)
    done = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"],
                          check=False, capture_output=True, text=True)
    return lib if done.returncode == 0 and lib.exists() else None


def shim_env(shim: Path, journal: Path, data_dir: Path) -> dict[str, str]:
    """Environment that makes a child journal its fsyncs of files under `data_dir`."""
    return {"LD_PRELOAD": str(shim), "STRONGROOM_FSYNC_JOURNAL": str(journal),
            "STRONGROOM_FSYNC_PREFIX": str(data_dir.resolve()) + os.sep}


def snapshot_sizes(data_dir: Path) -> dict[str, int]:
    """Every regular file under `data_dir` with its size (the durable baseline of a process
    that starts on this directory)."""
    out = {}
    for path in data_dir.resolve().rglob("*"):
        if path.is_file():
            out[str(path)] = path.stat().st_size
    return out


@dataclass
class CrashImage:
    """What a simulated crash did to a data dir."""

    truncated: dict[str, tuple[int, int]] = field(default_factory=dict)
    """path -> (size before, durable size)"""
    removed: list[str] = field(default_factory=list)
    bytes_lost: int = 0
    last_wal_sync: float | None = None
    """Monotonic time of the last fsync of a WAL file (None: none since start)."""

    def describe(self) -> str:
        """One line for the history."""
        return (f"{self.bytes_lost} un-fsynced bytes dropped: {len(self.truncated)} files cut back, "
                f"{len(self.removed)} never-synced files removed")


def simulate_crash(data_dir: Path, journal: Path, baseline: dict[str, int]) -> CrashImage:
    """Cut `data_dir` (whose process was SIGKILLed) back to what fsync made durable since the
    process started on `baseline`; empties the journal for the next process."""
    durable = dict(baseline)
    image = CrashImage()
    if journal.exists():
        for line in journal.read_text(errors="replace").splitlines():
            try:
                if line.startswith("S "):
                    _, t, length, synced = line.split(" ", 3)
                    durable[synced] = max(durable.get(synced, 0), int(length))
                    if synced.endswith(".log"):
                        image.last_wal_sync = float(t)
                elif line.startswith("R "):
                    _, _t, rest = line.split(" ", 2)
                    src, dst = rest.split("\t", 1)
                    if src in durable:
                        durable[dst] = durable.pop(src)
                    else:
                        durable.pop(dst, None)
            except ValueError:
                continue  # a line torn by the kill
    for path in sorted(p for p in data_dir.resolve().rglob("*") if p.is_file()):
        name = str(path)
        size = path.stat().st_size
        keep = durable.get(name)
        if keep is None:
            image.removed.append(name)
            image.bytes_lost += size
            path.unlink()
        elif size > keep:
            image.truncated[name] = (size, keep)
            image.bytes_lost += size - keep
            os.truncate(path, keep)
    journal.write_text("")
    return image

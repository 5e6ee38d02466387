"""Clock jumps: a process whose real-time clock is stepped while it runs, its monotonic clock not.

A process started with `LD_PRELOAD=<shim>` and `STRONGROOM_CLOCK_OFFSET=<file>` reads
CLOCK_REALTIME (`clock_gettime`, `gettimeofday`, `time`: what Python's `time.time()` and the
logging module read) shifted by the signed number of nanoseconds in the file's first 8 bytes
(little-endian), mapped shared so that `set_offset` changes it at once, without a signal.
CLOCK_MONOTONIC and every other clock are left alone, as after an `date -s` or an NTP step. The
file must exist (8 bytes) before the process starts; without it the clock is not shifted.
"""

from __future__ import annotations

import struct
from pathlib import Path

from strongroom.chaos.fsync import build_shim

__all__ = ["CLOCK_SHIM_SOURCE", "build_clock_shim", "clock_env", "set_offset"]

CLOCK_SHIM_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *offset_ns = NULL;
static int tried = 0;
static int (*real_clock_gettime)(clockid_t, struct timespec *) = NULL;

static void init(void) {
    if (!real_clock_gettime) real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    if (tried) return;
    tried = 1;
    const char *path = getenv("STRONGROOM_CLOCK_OFFSET");
    if (!path) return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    void *m = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m != MAP_FAILED) offset_ns = (volatile int64_t *)m;
}

static void shift(struct timespec *ts) {
    if (!offset_ns) return;
    int64_t ns = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + *offset_ns;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
    if (ts->tv_nsec < 0) { ts->tv_nsec += 1000000000LL; ts->tv_sec -= 1; }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    init();
    int r = real_clock_gettime(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    init();
    int r = real_clock_gettime(CLOCK_REALTIME, &ts);
    if (r != 0) return r;
    shift(&ts);
    if (tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
    (void)tz;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    init();
    real_clock_gettime(CLOCK_REALTIME, &ts);
    shift(&ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
"""


def build_clock_shim(out_dir: Path) -> Path | None:
    """Compile the clock shim into `out_dir`; None if no C compiler works here."""
    return build_shim(out_dir, CLOCK_SHIM_SOURCE, "clock_shift")


def set_offset(path: Path, seconds: float) -> None:
    """Step the shifted processes' real-time clock to `seconds` from the true one (in place:
    the processes map the file)."""
    raw = struct.pack("<q", int(seconds * 1e9))
    if not path.exists():
        path.write_bytes(raw)
        return
    with open(path, "r+b") as f:
        f.write(raw)


def clock_env(shim: Path, offset_file: Path) -> dict[str, str]:
    """Environment of a process whose real-time clock `set_offset(offset_file, ...)` steps."""
    if not offset_file.exists():
        set_offset(offset_file, 0.0)
    return {"LD_PRELOAD": str(shim), "STRONGROOM_CLOCK_OFFSET": str(offset_file)}

"""How long the timing thread waited for a CPU (Linux schedstat), so contention can be told from the model.

``/proc/thread-self/schedstat`` holds three numbers for the calling thread: nanoseconds on a CPU, nanoseconds
runnable but waiting on a run queue, timeslices. A round's wall time minus its run-queue wait is the time the
thread ran or slept of its own accord (a sleep, I/O, a lock): what the model costs, whatever a neighbour
process takes. Where the file is missing (not Linux, schedstat off) every reading is None and nothing is
claimed.
"""
from __future__ import annotations

import os

from ..runtime_stats import own_times  # noqa: F401 -- re-exported: the saved rounds' own times

PATH = "/proc/thread-self/schedstat"


class RunqueueClock:
    """Reads the calling thread's cumulative run-queue wait in seconds (None when unavailable). The file stays
    open: a read is one pread (a few microseconds), done outside the timed calls."""

    def __init__(self, path: str = PATH):
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY)
        except OSError:
            self._fd = None
        if self._fd is not None and self.read() is None:
            self.close()

    def read(self) -> float | None:
        if self._fd is None:
            return None
        try:
            fields = os.pread(self._fd, 128, 0).split()
            return int(fields[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

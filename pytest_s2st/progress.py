"""Progress lines of long phases (pytest-free): no phase stays silent for more than EVERY_S seconds.

A phase that can take minutes (an instruction count under valgrind, a service level of a real model, the first
build of a staged model) runs inside ``with phase(what, ...)``: while it runs, a daemon thread writes one line
every EVERY_S seconds -- what, how far (``done()`` of ``total`` when the phase can tell), how long so far and about
how long is left -- through the writer the plugin layer installed (the terminal reporter, silent under -q). A
phase that ends within EVERY_S writes nothing. Without an installed writer (the core used on its own) a phase
writes nothing either.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Callable, Iterator

EVERY_S = 10.0
MIN_EVERY_S = 0.05
EVERY_ENV = "S2ST_PROGRESS_EVERY_S"  # a private knob: the tests shorten the interval

Writer = Callable[[str], None]
_writers: list[Writer] = []  # a stack: a pytest session nested in another (pytester) installs its own
_lock = threading.Lock()     # one line at a time, whichever thread writes it
_active: list[object] = []   # the phases running now, innermost last: only the innermost reports


def interval() -> float:
    """EVERY_S, or the private knob's value when it is a positive number."""
    try:
        value = float(os.environ.get(EVERY_ENV, ""))
    except ValueError:
        return EVERY_S
    if not 0 < value < 86400:  # nan, inf (Event.wait overflows) and <= 0: the default
        return EVERY_S
    return max(value, MIN_EVERY_S)  # 1e-9 would print thousands of lines a second


def install(writer: Writer) -> None:
    """The plugin layer's writer of progress lines (pytest_configure); remove() undoes it."""
    _writers.append(writer)


def remove(writer: Writer) -> None:
    if writer in _writers:
        _writers.remove(writer)


def write(line: str) -> None:
    """One progress line through the installed writer, or nowhere. A failing writer loses the line, never the
    phase it reports on."""
    writer = _writers[-1] if _writers else None
    if writer is None:
        return
    with _lock:
        try:
            writer(line)
        except Exception:  # noqa: BLE001 -- a closed terminal must not fail a measurement
            pass


def duration(seconds: float) -> str:
    """'42 s', '3 min 05 s', '1 h 02 min'."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def status_line(what: str, elapsed: float, done: int | None = None, total: int | None = None, unit: str = "",
                limit_s: float | None = None) -> str:
    """``s2st: <what>: 3/14 requests, 40 s so far, about 2 min 27 s left`` -- the left part only when done
    and total say how far; without them, the phase's bound (``gives up after``) when it has one."""
    parts = []
    if done is not None:
        parts.append(f"{done}/{total} {unit}".rstrip() if total else f"{done} {unit}".rstrip())
    parts.append(f"{duration(elapsed)} so far")
    if done and total and 0 < done < total:
        parts.append(f"about {duration(elapsed / done * (total - done))} left")
    elif limit_s is not None and not (done and total and done >= total):
        parts.append(f"gives up after {duration(limit_s)}")
    return f"s2st: {what}: " + ", ".join(parts)


@contextlib.contextmanager
def phase(what: str, *, total: int | None = None, unit: str = "", done: Callable[[], int] | None = None,
          limit_s: float | None = None, every: float | None = None) -> Iterator[None]:
    """Report the block every ``every`` (default interval()) seconds while it runs. ``done()`` says how far
    (polled from the reporting thread: it must be cheap and thread-safe, e.g. counting a file's lines); an
    exception from it leaves the count out of that line."""
    if not _writers:
        yield
        return
    every = interval() if every is None else every
    stop = threading.Event()
    start = time.monotonic()
    token = object()
    _active.append(token)

    def report() -> None:
        while not stop.wait(every):
            if _active and _active[-1] is not token:
                continue  # a phase inside this one reports (a count inside a measurement): one line, not two
            count = None
            if done is not None:
                try:
                    count = int(done())
                except Exception:  # noqa: BLE001 -- how far is a courtesy; the line still says how long
                    count = None
            if not stop.is_set():
                write(status_line(what, time.monotonic() - start, count, total, unit, limit_s))

    thread = threading.Thread(target=report, name=f"s2st-progress: {what[:40]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        _active.remove(token)
        thread.join(timeout=5)


def count_lines(path: "os.PathLike[str] | str", cap_bytes: int = 64 * 2**20) -> int:
    """Newlines in the first ``cap_bytes`` of a file (0 when it does not exist yet): how many records an
    append-only JSONL holds so far."""
    try:
        with open(path, "rb") as f:
            n, left = 0, cap_bytes
            while left > 0:
                chunk = f.read(min(left, 2**20))
                if not chunk:
                    break
                n += chunk.count(b"\n")
                left -= len(chunk)
            return n
    except OSError:
        return 0

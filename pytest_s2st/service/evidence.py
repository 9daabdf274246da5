"""The load generator's evidence on disk, written off the event loop (pytest-free).

One writer thread, FIFO, per run (``Writer``): file IO and hashing never block the event loop that
stamps chunk arrivals (measured here: inline WAV writes raised the c=64 TTFA overhead p99
several-fold). Each response's PCM goes to its WAV as it arrives (``AudioSink``): the event loop
counts the bytes and hands them on in pieces of about ``FLUSH_BYTES``; the writer thread appends them
to out_dir/wav/<id>.wav.part and feeds the SHA-256, and, once the response has ended, writes the
header, checks the hash the server announced and renames the file, or deletes it when the response
failed. So a stream costs the client a bounded window of audio (FLUSH_BYTES plus one arrival, plus what
the writer has not yet written), never the whole response: an endless stream at c64 does not
grow the client by its audio. Should the writer fall behind (a slow disk, a starved thread), more
than ``MAX_QUEUED_BYTES`` handed over and not yet written makes the readers wait (``Writer.room``)
before they read on: the server's sends then block, and the client's memory stays bounded. The records are
appended to requests.jsonl in the order they were handed over, each flushed; a record's WAV is on disk before its line.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Callable

from .. import runs
from .record import RequestRecord

FLUSH_BYTES = 64 * 1024  # audio the event loop gathers before handing it to the writer thread
MAX_QUEUED_BYTES = 8 * 1024 * 1024  # audio handed over, not yet written: past it, reading waits


class AudioSink:
    """One response's PCM on its way to its WAV: counted on the event loop, written and hashed by the
    writer thread. ``size`` is the bytes received so far (the caps check it); nothing else is kept
    but the piece not yet handed on."""

    def __init__(self, path: Path, submit: Callable[..., Any], queued: Callable[[int], None] | None = None) -> None:
        self.path, self.size = path, 0
        self._submit = submit
        self._queued = queued or (lambda n: None)  # the writer's count of bytes handed over, not yet written
        self._pending = bytearray()
        self._fh: IO[bytes] | None = None
        self._sha = hashlib.sha256()
        self._error: OSError | None = None

    @property
    def tmp(self) -> Path:
        return self.path.with_name(self.path.name + ".part")

    # --- event loop -----------------------------------------------------------------------------------

    def add(self, data: bytes) -> None:
        self.size += len(data)
        self._pending += data
        if len(self._pending) >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            data, self._pending = self._pending, bytearray()
            self._queued(len(data))
            self._submit(self._write, data)

    # --- writer thread --------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        self._queued(-len(data))
        if self._error is not None:
            return
        try:
            if self._fh is None:
                self._fh = open(self.tmp, "wb")
                self._fh.write(bytes(runs.WAV_HEADER_BYTES))  # the header, once the size is known
            self._fh.write(data)
        except OSError as exc:  # e.g. disk full: the response gets no WAV, hence no "ok"
            self._error = exc
        self._sha.update(data)

    def finish(self, sample_rate: int, expected_sha256: str | None = None) -> str:
        """Writer thread: the WAV under its final name; returns the PCM's SHA-256 hex digest.
        ValueError when it differs from ``expected_sha256``; OSError when the file could not be written."""
        digest = self._sha.hexdigest()
        if expected_sha256 not in (None, digest):
            self.discard()
            raise ValueError("pcm_sha256 in the done event does not match the received PCM")
        if self._error is None and self._fh is None:
            self._write(b"")  # a response whose audio was never flushed still gets its file
        try:
            if self._error is not None:
                raise self._error
            assert self._fh is not None
            self._fh.seek(0)
            self._fh.write(runs.wav_header(self.size, sample_rate))
            self._fh.close()
            os.replace(self.tmp, self.path)
        except OSError:
            self.discard()
            raise
        return digest

    def discard(self) -> None:
        """Writer thread: no WAV for this response (failed, or its hash did not match)."""
        if self._fh is not None:
            self._fh.close()
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass


class Writer:
    """The run's one evidence-writer thread and its open requests.jsonl."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.error: str | None = None  # the first record that could not be written
        self._fh: IO[str] | None = None
        self.queued = 0  # audio bytes handed to the thread, not yet written
        self._lock = threading.Lock()
        # normal priority: the thread carries every byte of audio as it arrives, and its backpressure paces the
        # readers. At nice 19 it starved on a loaded machine (c64 endless streams, 2 shared cores, load ~10:
        # 263 MB of audio in 30 s against 925 MB at normal priority, benchmarks/test_client_memory.py)
        self._io = ThreadPoolExecutor(1, thread_name_prefix="s2st-evidence")

    def open(self) -> None:
        self._fh = open(self.out_dir / runs.REQUESTS, "a", encoding="utf-8")

    def sink(self, rid: str) -> AudioSink:
        return AudioSink(runs.wav_path(self.out_dir, rid), self._io.submit, self._count)

    def _count(self, n: int) -> None:
        with self._lock:
            self.queued += n

    async def room(self) -> None:
        """Returns once the audio not yet written is within MAX_QUEUED_BYTES (at once, unless the
        thread has fallen behind): the readers' backpressure."""
        while self.queued > MAX_QUEUED_BYTES:
            await asyncio.sleep(0.002)

    def keep(self, record: RequestRecord, sink: AudioSink | None, completed: bool) -> None:
        """Queue the record (its WAV first when ``completed``, else the sink's part file is removed)."""
        if sink is not None:
            sink.flush()
        self._io.submit(self._persist, record, sink, completed)

    def barrier(self) -> Future:
        """A future done once everything queued before it is on disk."""
        return self._io.submit(lambda: None)

    def _persist(self, record: RequestRecord, sink: AudioSink | None, completed: bool) -> None:
        try:
            self._persist_one(record, sink, completed)
        except Exception as exc:  # a future nobody awaits would drop it: the run raises it at the end
            self.error = self.error or f"could not write record {record.id}: {exc}"

    def _persist_one(self, record: RequestRecord, sink: AudioSink | None, completed: bool) -> None:
        if sink is not None and not completed:
            sink.discard()
        elif sink is not None:
            try:
                digest = sink.finish(record.sample_rate, record.server_done.get("pcm_sha256"))
                record.pcm_sha256, record.wav = digest, f"{runs.WAV_DIR}/{sink.path.name}"
            except ValueError as exc:
                record.status, record.audio_seconds, record.error = "error", None, str(exc)
            except OSError as exc:  # no WAV, no "ok": the evidence would be incomplete
                record.status, record.audio_seconds, record.error = "error", None, f"could not write {sink.path}: {exc}"
        assert self._fh is not None
        # the file stays open for the run; a flush per record gives the same durability as reopening
        self._fh.write(runs.record_json(record.to_dict()) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Everything queued is on disk; the file closed."""
        self._io.shutdown(wait=True)
        if self._fh is not None:
            self._fh.close()

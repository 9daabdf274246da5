"""The model side of the reference server: ONE model thread runs the synthesizer (``ModelWorker``); the
requests' jobs wait in a bounded asyncio queue in front of it. A whole-waveform job's future gets the
int16 PCM; a streaming job's queue gets each decoded chunk as soon as it exists (``next_chunk``)."""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .resample import Resampler

Synthesizer = Callable[[dict], tuple[np.ndarray, int]]
# (request, emit(waveform chunk, sample_rate)) -> None: calls emit for each decoded chunk, in order
StreamSynthesizer = Callable[[dict, Callable[[np.ndarray, int], None]], None]


class ClientGone(Exception):
    """Raised inside the model thread by emit() once the request's client went away: stops the work."""


@dataclass
class Job:
    request: dict
    future: asyncio.Future = field(repr=False)
    # streaming: ("audio", pcm, rate) | ("end",) | ("error", exc)
    chunks: asyncio.Queue | None = field(default=None, repr=False)
    sample_rate: int | None = None  # an OpenAI request's "sample_rate": the answer is resampled to it
    speed: float = 1.0  # an OpenAI request's "speed" (resample.py: a change of playback rate)

    def resampler(self, native_rate: int) -> Resampler | None:
        rate = self.sample_rate or native_rate
        return None if rate == native_rate and self.speed == 1 else Resampler(native_rate, rate, self.speed)


def to_pcm16(waveform: Any, sample_rate: Any) -> tuple[bytes, int]:
    """float waveform in [-1, 1] -> little-endian int16 bytes; ValueError on unusable output."""
    wave = np.asarray(waveform)
    if wave.ndim != 1:
        raise ValueError(f"synthesizer returned a {wave.ndim}-D waveform; expected 1-D")
    if wave.size == 0:
        raise ValueError("synthesizer returned an empty waveform")
    if not np.issubdtype(wave.dtype, np.floating):
        raise ValueError(f"synthesizer returned dtype {wave.dtype}; expected float32")
    if not np.all(np.isfinite(wave)):
        raise ValueError("synthesizer returned non-finite samples")
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) or sample_rate <= 0:
        raise ValueError(f"synthesizer returned sample_rate {sample_rate!r}; expected a positive int")
    pcm = np.round(np.clip(wave.astype(np.float64), -1.0, 1.0) * 32767.0).astype("<i2")
    return pcm.tobytes(), int(sample_rate)


class ModelWorker:
    """ONE model thread and the bounded queue in front of it (full: ``put`` raises asyncio.QueueFull)."""

    def __init__(self, synthesize: Synthesizer, stream: StreamSynthesizer | None, queue_size: int) -> None:
        self.synthesize, self.stream, self.queue_size = synthesize, stream, queue_size
        self.queue: asyncio.Queue | None = None
        self.executor: ThreadPoolExecutor | None = None
        self.task: asyncio.Task | None = None

    def put(self, job: Job) -> None:
        self.queue.put_nowait(job)

    def queued(self) -> int:
        return self.queue.qsize()

    def generate(self, job: Job) -> tuple[bytes, int]:
        # on the model thread: the resampling and int16 conversion of a long waveform stay off the event loop
        wave, rate = self.synthesize(job.request)
        to_pcm16(wave, rate)  # the synthesizer's own output checked before any resampling
        resampler = job.resampler(int(rate))
        if resampler is not None:
            wave = np.concatenate([resampler.feed(wave), resampler.flush()])
            rate = job.sample_rate or rate
        return to_pcm16(wave, rate)

    def generate_chunks(self, job: Job, loop: asyncio.AbstractEventLoop) -> None:
        """On the model thread: each decoded chunk goes to the request's queue as int16 PCM at once."""
        convert: list = []  # [resampler or None, the native rate], made at the first chunk

        def send(wave: Any, rate: int) -> None:
            if np.asarray(wave).size:
                pcm, rate = to_pcm16(wave, rate)  # per sample: chunk by chunk == the whole at once
                loop.call_soon_threadsafe(job.chunks.put_nowait, ("audio", pcm, rate))

        def emit(wave: Any, sample_rate: int) -> None:
            if job.future.cancelled():
                raise ClientGone()
            if np.asarray(wave).size == 0:
                return
            to_pcm16(wave, sample_rate)  # the synthesizer's own output checked before any resampling
            if not convert:
                convert.extend([job.resampler(int(sample_rate)), sample_rate])
            if convert[0] is None:  # a changed rate is refused by the handler
                return send(wave, sample_rate)
            if sample_rate != convert[1]:
                raise ValueError(f"synthesizer changed its sample rate mid-stream ({convert[1]} -> {sample_rate})")
            send(convert[0].feed(wave), job.sample_rate or sample_rate)  # resampled with state: == whole

        self.stream(job.request, emit)
        if convert and convert[0] is not None:
            send(convert[0].flush(), job.sample_rate or convert[1])

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            job: Job = await self.queue.get()
            if job.future.cancelled():  # client went away while queued: skip the work
                continue
            if job.chunks is not None:
                try:  # items the model thread queued with call_soon_threadsafe run before this resumes
                    await loop.run_in_executor(self.executor, self.generate_chunks, job, loop)
                except ClientGone:
                    continue
                except Exception as exc:
                    job.chunks.put_nowait(("error", exc))
                else:
                    job.chunks.put_nowait(("end",))
                continue
            try:
                result = await loop.run_in_executor(self.executor, self.generate, job)
            except Exception as exc:  # reported to that request; the worker lives on
                if not job.future.done():
                    job.future.set_exception(exc)
            else:
                if not job.future.done():
                    job.future.set_result(result)

    def start(self) -> None:
        self.queue = asyncio.Queue(maxsize=self.queue_size)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="s2st-model")
        self.task = asyncio.create_task(self.run())

    def stop(self) -> None:
        self.task.cancel()
        self.executor.shutdown(wait=False, cancel_futures=True)


async def next_chunk(job: Job) -> tuple[bytes, int] | None:
    """The next decoded chunk of a streaming job; None at the end; the model's exception when it failed."""
    item = await job.chunks.get()
    if item[0] == "audio":
        return item[1], item[2]
    if item[0] == "end":
        return None
    raise item[1]

"""How the reference server sends an answer once the model has it (``Answers``): this project's SSE audio/done
events, OpenAI's WAV, raw PCM or SSE deltas, whole or chunk by chunk as a streaming model decodes it; a
failure after the headers went out told in-band where the protocol can; the error bodies of both
protocols."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from typing import Any, Mapping

from aiohttp import web

from .. import runs
from . import openai_api as oa
from .model_worker import Job, next_chunk

NON_STREAMING_NOTE = "reference pipeline is non-streaming: the whole waveform is generated, then sent in chunks"
STREAMING_NOTE = "each chunk is sent as soon as the model has decoded it"


def sse_event(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


class Answers:
    """The answers of one app: ``chunk_samples`` int16 samples an event or chunk; ``state`` its served /
    failed counters (the app's, readable by tests)."""

    def __init__(self, chunk_samples: int, state: dict) -> None:
        self.chunk_samples, self.state = chunk_samples, state

    @staticmethod
    def error(openai: bool, status: int, message: str, field: str | None = None, code: str | None = None,
               headers: dict | None = None) -> web.Response:
        if openai:  # OpenAI's error shape (the SDK raises it as APIStatusError with this message)
            return web.json_response(oa.error_body(status, message, field, code), status=status, headers=headers)
        return web.json_response({"error": message, **({"field": field} if field else {})}, status=status,
                                 headers=headers)

    async def _fail_in_band(self, response: web.StreamResponse, exc: Exception, sse: bool) -> web.StreamResponse:
        """A failure after the headers went out: counted, told as an SSE error event where the protocol has one
        (raw PCM has none), and the stream ended; a client already gone is left alone."""
        self.state["failed"] += 1
        try:
            if sse:
                await response.write(sse_event({"type": "error", "message": f"{type(exc).__name__}: {exc}"}))
            await response.write_eof()
        except ConnectionError:
            pass
        return response

    async def own_sse(self, request: web.Request, pcm: bytes, sample_rate: int) -> web.StreamResponse:
        """This project's answer of a whole waveform: audio events, then the done event."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            await self._own_events(response, pcm, sample_rate)
        except ConnectionError:
            return response  # client went away mid-stream; nothing left to tell it
        except Exception as exc:  # headers already sent: report in-band
            return await self._fail_in_band(response, exc, sse=True)
        self.state["served"] += 1
        return response

    async def streamed(self, request: web.Request, job: Job, openai: bool, shape: dict) -> web.StreamResponse:
        """A streaming model's answer: headers go out with the first decoded chunk (an error before it is a
        plain 500); every chunk is written as soon as the model thread hands it over."""
        try:
            first = await next_chunk(job)
            if first is None:
                raise ValueError("synthesizer returned an empty waveform")
            pieces = [first[0]]
            whole = openai and (shape["format"] == "wav" or not shape["streamed"])
            if whole:  # a WAV file names its length first, and "stream": false asks for one body: whole, then sent
                while (chunk := await next_chunk(job)) is not None:
                    pieces.append(chunk[0])
        except asyncio.CancelledError:
            job.future.cancel()
            raise
        except Exception as exc:
            self.state["failed"] += 1
            return self.error(openai, 500, f"synthesis failed: {type(exc).__name__}: {exc}")
        rate = first[1]
        if whole:
            return await self.openai(request, b"".join(pieces), rate, shape)
        sse = not openai or shape["stream_format"] == "sse"
        ctype = "text/event-stream" if sse else f"audio/pcm;rate={rate}"
        response = web.StreamResponse(headers={"Content-Type": ctype, "Cache-Control": "no-cache"})
        if openai:
            response.enable_chunked_encoding()
        digest, samples, index, chunk = hashlib.sha256(), 0, 0, first
        try:
            await response.prepare(request)
            while chunk is not None:
                pcm = chunk[0]
                if chunk[1] != rate:
                    raise ValueError(f"synthesizer changed its sample rate mid-stream ({rate} -> {chunk[1]})")
                digest.update(pcm)
                samples += len(pcm) // 2
                if not openai:
                    await response.write(sse_event({"type": "audio", "index": index, "sample_rate": rate,
                                                    "pcm": base64.b64encode(pcm).decode("ascii")}))
                else:
                    await response.write(oa.delta_event(pcm, rate) if sse else pcm)
                index += 1
                chunk = await next_chunk(job)
            if not openai:
                await response.write(sse_event({
                    "type": "done", "audio_seconds": samples / rate, "samples": samples, "sample_rate": rate,
                    "streaming": True, "note": STREAMING_NOTE, "pcm_sha256": digest.hexdigest(),
                    "chunks": index}))
            elif sse:
                await response.write(oa.done_event(samples, shape["characters"]))
            await response.write_eof()
        except ConnectionError:
            job.future.cancel()  # the model thread stops at its next chunk
            return response
        except asyncio.CancelledError:
            job.future.cancel()
            raise
        except Exception as exc:  # headers already sent: report in-band where the protocol can
            job.future.cancel()
            return await self._fail_in_band(response, exc, sse)
        self.state["served"] += 1
        return response

    async def openai(self, request: web.Request, pcm: bytes, sample_rate: int, shape: dict) -> web.StreamResponse:
        """OpenAI's answers: a WAV file, one raw PCM body ("stream": false), raw PCM chunks, or SSE delta
        events then the done event."""
        if shape["format"] == "wav":
            self.state["served"] += 1
            return web.Response(body=runs.wav_bytes(pcm, sample_rate), content_type="audio/wav")
        sse = shape["stream_format"] == "sse"
        if not shape["streamed"]:
            self.state["served"] += 1
            return web.Response(body=pcm, headers={"Content-Type": f"audio/pcm;rate={sample_rate}"})
        ctype = oa.SSE_TYPE if sse else f"audio/pcm;rate={sample_rate}"  # the rate: pcm does not say it
        response = web.StreamResponse(headers={"Content-Type": ctype, "Cache-Control": "no-cache"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        step = 2 * self.chunk_samples
        try:
            for start in range(0, len(pcm), step):
                chunk = pcm[start: start + step]
                await response.write(oa.delta_event(chunk, sample_rate) if sse else chunk)
            if sse:
                await response.write(oa.done_event(len(pcm) // 2, shape["characters"]))
            await response.write_eof()
        except ConnectionError:
            return response  # client went away mid-stream
        self.state["served"] += 1
        return response

    async def _own_events(self, response: web.StreamResponse, pcm: bytes, sample_rate: int) -> None:
        """Audio events of chunk_samples int16 samples each, then the done event."""
        step = 2 * self.chunk_samples
        for index, start in enumerate(range(0, len(pcm), step)):
            chunk = base64.b64encode(pcm[start : start + step]).decode("ascii")
            await response.write(sse_event({"type": "audio", "index": index, "pcm": chunk, "sample_rate": sample_rate}))
        samples = len(pcm) // 2
        await response.write(sse_event({
            "type": "done", "audio_seconds": samples / sample_rate, "samples": samples, "sample_rate": sample_rate,
            "streaming": False, "note": NON_STREAMING_NOTE, "pcm_sha256": hashlib.sha256(pcm).hexdigest(),
        }))
        await response.write_eof()


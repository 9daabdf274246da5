"""What one response may make the client hold, all from ``max_audio_s`` (``Limits``), and the
request-level failure a reader raises (``Fail``)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

_MAX_EVENT = 16 * 1024 * 1024  # one SSE event, whatever max_audio_s allows
_EVENT_SLACK = 4096  # the JSON around one event's base64 PCM
DEFAULT_RATE = 48_000  # the PCM bound's rate until the stream names its own
EVENTS_PER_AUDIO_S = 100  # one per 10 ms of the allowed audio: finer than streaming TTS sends


class Fail(Exception):
    """A request-level failure with the reason to record."""


@dataclass(frozen=True)
class Limits:
    """What one response may make the client hold, all from ``max_audio_s``."""
    max_audio_s: float

    @functools.lru_cache(maxsize=16)  # (self, rate) -> bounds: computed once per rate, not per response
    def at(self, rate: int | None) -> tuple[int, int, int]:
        """(PCM bytes, SSE event bytes, HTTP chunk bytes) at ``rate``."""
        return self.pcm_bytes(rate), self.event_bytes(rate), self.chunk_bytes(rate)

    def pcm_bytes(self, rate: int | None) -> int:
        return 2 * int(self.max_audio_s * (rate or DEFAULT_RATE))

    def event_bytes(self, rate: int | None) -> int:
        """One SSE event: the base64 of one chunk holding all the allowed audio, at most 16 MiB."""
        return min(_MAX_EVENT, 4 * -(-self.pcm_bytes(rate) // 3) + _EVENT_SLACK)

    def chunk_bytes(self, rate: int | None) -> int:
        """One HTTP chunk: a server may put the whole response in one."""
        return 4 * -(-self.pcm_bytes(rate) // 3) + 64 * 1024

    @property
    def events(self) -> int:
        return int(self.max_audio_s * EVENTS_PER_AUDIO_S) + 100

    def why(self, rate: int | None) -> str:
        return f"max_audio_s={self.max_audio_s:g} at {rate or DEFAULT_RATE} Hz"

"""The load generator's options: one dataclass, built once (from keywords or from a case's settings), checked
once, and passed through ``run_load`` to the run, its transport and the level's summary.json entry."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import S2STError
from . import arrivals
from . import openai_api as oa

MAX_AUDIO_S = 600.0  # the default bound on the audio of one response

# the settings (settings.py names) a service level's load reads: what a test without a case passes on
SETTING_NAMES = ("warmup", "requests", "request_timeout", "max_audio_s", "protocol", "extra_body", "sample_rate",
                 "request_rate", "burstiness")


@dataclass(frozen=True)
class LoadOptions:
    """How ``run_load`` loads an endpoint (the endpoint, workload, concurrency and out_dir are its arguments).

    ``warmups`` closed-loop requests first, then ``requests`` measured ones (None: one pass over the
    workload). ``timeout_s`` bounds each whole request; ``read_timeout_s`` (None: timeout_s) each read
    (a stall); ``total_timeout_s`` the whole run, cancelled requests recorded as errors. ``max_audio_s``
    bounds the audio of one response (max_audio_s * sample_rate * 2 bytes of PCM), and so the SSE event,
    HTTP chunk and event count no response within it needs (readers.Limits). ``targets``: goodput
    {ttfa_s, rtf} for the summary. ``extra`` is merged into the level's entry of summary.json.
    ``protocol`` (wire.PROTOCOLS): "s2st" (this project's SSE dialect) or "openai" (OpenAI's speech API:
    ``extra_body`` merged into every request; raw PCM answers at ``sample_rate`` unless their
    Content-Type names a rate). ``arrival`` (an arrivals.Arrival: its process and parameters, one object; the
    default, arrivals.Gamma at rate inf, is the closed loop) shapes the measured phase's arrivals.
    ``transport`` (wire.TRANSPORTS): "http1" (http1.py, one keep-alive socket per worker) or "aiohttp"
    (aiohttp's client, a pool of ``concurrency``): the same load over either, for their comparison."""
    warmups: int = 1
    timeout_s: float = 30.0
    total_timeout_s: float | None = None
    requests: int | None = None
    read_timeout_s: float | None = None
    targets: dict | None = None
    extra: dict[str, Any] | None = None
    max_audio_s: float = MAX_AUDIO_S
    protocol: str = "s2st"
    extra_body: dict | None = None
    sample_rate: int = oa.DEFAULT_SAMPLE_RATE
    arrival: arrivals.Arrival = arrivals.Gamma()
    transport: str = "http1"

    @classmethod
    def of(cls, options: "LoadOptions | None" = None, **fields: Any) -> "LoadOptions":
        """``options`` (default: the defaults) with ``fields`` replaced; an unknown field is one line."""
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise S2STError(f"run_load: unknown option(s) {', '.join(unknown)}; options are "
                            f"{', '.join(f.name for f in dataclasses.fields(cls))}")
        return dataclasses.replace(options or cls(), **fields)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], **fields: Any) -> "LoadOptions":
        """A level's options from its settings (SETTING_NAMES; a missing or empty one takes its default)."""
        return cls.of(
            warmups=settings["warmup"], timeout_s=float(settings["request_timeout"]), requests=settings.get("requests"),
            max_audio_s=float(settings.get("max_audio_s") or MAX_AUDIO_S),
            protocol=settings.get("protocol") or cls.protocol, extra_body=settings.get("extra_body"),
            sample_rate=int(settings.get("sample_rate") or oa.DEFAULT_SAMPLE_RATE),
            arrival=arrivals.from_settings(settings), **fields)

    def checked(self, concurrency: int, level_keys: tuple[str, ...]) -> "LoadOptions":
        """These options, checked (S2STError naming the option and value) and normalised: the arrival's
        parameters (its rates floats, "inf" too), read_timeout_s filled, extra_body a checked dict.
        ``level_keys``: the level entry's keys the load generator writes, which ``extra`` may not hold."""
        from . import wire  # lazy: heavy

        wire.transport(self.transport)
        protocol = wire.protocol(self.protocol)
        try:
            oa.check_rate(self.sample_rate, "run_load")
            if not isinstance(self.arrival, arrivals.Arrival):
                raise ValueError(f"arrival must be an arrivals.Arrival, got {type(self.arrival).__name__}")
            arrival = self.arrival.checked()
        except ValueError as exc:
            raise S2STError(f"run_load: {exc}") from None
        requests = self.requests
        if concurrency < 1 or self.warmups < 0 or (requests is not None and requests < 0):
            raise S2STError(f"concurrency={concurrency}, warmups={self.warmups}, requests={requests}: out of range")
        if self.timeout_s <= 0 or (self.total_timeout_s is not None and self.total_timeout_s <= 0):
            raise S2STError(f"timeout_s={self.timeout_s}, total_timeout_s={self.total_timeout_s}: must be positive")
        max_audio_s = self.max_audio_s
        if isinstance(max_audio_s, bool) or not isinstance(max_audio_s, (int, float)) or not (
                math.isfinite(max_audio_s) and max_audio_s > 0):
            raise S2STError(f"max_audio_s={max_audio_s!r}: must be a positive number of seconds")
        clash = sorted(set(self.extra or {}) & (set(level_keys) | set(arrival.level_entry())))
        if clash:
            raise S2STError(f"run_load extra: {', '.join(clash)} are written by the load generator itself")
        extra_body = self.extra_body
        if extra_body is not None:
            try:
                extra_body = oa.parse_extra_body(extra_body)
            except ValueError as exc:
                raise S2STError(f"run_load extra_body: {exc}") from None
        protocol.check()  # e.g. a bad API key refused before anything is sent
        return dataclasses.replace(
            self, extra_body=dict(extra_body or {}), arrival=arrival,
            read_timeout_s=self.timeout_s if self.read_timeout_s is None else self.read_timeout_s)

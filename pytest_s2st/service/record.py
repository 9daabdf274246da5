"""What the load generator records: one request's line of requests.jsonl (``RequestRecord``) and one
level's entry of summary.json (``LevelEntry``), each a dataclass whose ``to_dict`` is the JSON written
(keys in the order they always had) and whose ``from_dict`` reads it back.

A record is filled as its request runs: the transport stamps ``start_t`` / ``send_t`` / ``send_wall``,
the reader of its answer (readers/) the arrivals ``chunks``, ``first_audio_t``, ``done_t``,
``sample_rate``, ``streaming`` and ``server_done``, the client its ``status`` / ``error``, and the
evidence writer its ``pcm_sha256`` and ``wav``. Times are seconds since the run's start (``t0_perf``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import runs
from . import arrivals

# the fields of a workload item a request may carry (workload.py checks them); each protocol maps them
WORKLOAD_FIELDS = ("text", "language", "voice", "seed", "instruct")


@dataclass(slots=True, eq=False)
class RequestRecord:
    """One request, as requests.jsonl holds it."""
    id: str
    concurrency: int
    index: int
    warmup: bool
    workload_id: Any
    workload: dict = field(default_factory=dict)  # the item's WORKLOAD_FIELDS it has: keys of the JSON line
    due_t: float | None = None  # open loop: when the schedule wanted it sent
    start_t: float | None = None
    send_t: float | None = None
    send_wall: float | None = None
    first_audio_t: float | None = None
    chunks: runs.Timeline = field(default_factory=runs.Timeline)  # [t, nbytes] per arrival, compact
    done_t: float | None = None
    audio_seconds: float | None = None
    sample_rate: int | None = None
    http_status: int | None = None
    streaming: Any = None  # what the done event says (own SSE), False for a WAV
    status: str = "error"
    error: str | None = None
    pcm_sha256: str | None = None
    wav: str | None = None
    server_done: dict | None = None  # samples / sample_rate / pcm_sha256 the server says it sent; a key once read
    retried: bool = False  # sent again on a new connection: the kept one closed before any byte of its answer

    def to_dict(self) -> dict:
        """The JSON line's object: ``workload`` spread where its keys always stood, ``server_done`` only
        once an answer was read to its end; ``chunks`` stays a Timeline (runs.record_json writes its list)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "workload":
                out.update(value)
            elif f.name != "server_done" or value is not None:
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestRecord:
        """A record from its JSON object (TypeError on a key no record has)."""
        fields = dict(data)
        workload = {key: fields.pop(key) for key in WORKLOAD_FIELDS if key in fields}
        chunks = runs.Timeline(fields.pop("chunks", ()))
        return cls(**fields, workload=workload, chunks=chunks)


@dataclass(eq=False)
class LevelEntry:
    """One concurrency level's entry of summary.json, which run_load alone writes."""
    concurrency: int
    summary: dict  # stats.summarize, with set_rates' keys
    wall_s: float | None
    warmup_wall_s: float
    warmups: int
    requests: int
    timeout_s: float
    read_timeout_s: float
    total_timeout_s: float | None
    max_audio_s: float
    timed_out: bool
    started_wall: float
    t0_perf: float
    identity_error: str | None
    unasked: list  # a line each time a kept-alive connection held bytes nobody asked for (Transport.look)
    protocol: str
    # the arrival process's keys (Arrival.level_entry): request_rate ("inf": closed loop), burstiness,
    # arrival_seed, arrivals_method (arrivals.ARRIVAL_KEYS), then any of the process's own
    arrival: dict = field(default_factory=dict)
    protocol_entry: dict = field(default_factory=dict)  # the protocol's own keys (Protocol.level_entry)
    extra: dict = field(default_factory=dict)  # the caller's (LoadOptions.extra): may not overwrite the above

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _SPREAD}
        return {**out, **self.arrival, **self.protocol_entry, **self.extra}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LevelEntry:
        """An entry from its JSON object: the arrival's (ARRIVAL_KEYS) and the protocol's keys (PROTOCOL_KEYS)
        apart, any other into ``extra``."""
        own = {f.name for f in dataclasses.fields(cls)} - set(_SPREAD)
        return cls(**{k: v for k, v in data.items() if k in own},
                   arrival={k: v for k, v in data.items() if k in arrivals.ARRIVAL_KEYS},
                   protocol_entry={k: v for k, v in data.items() if k in PROTOCOL_KEYS},
                   extra={k: v for k, v in data.items()
                          if k not in own and k not in PROTOCOL_KEYS and k not in arrivals.ARRIVAL_KEYS})


_SPREAD = ("arrival", "protocol_entry", "extra")  # LevelEntry's dicts, spread into its JSON object


PROTOCOL_KEYS = ("extra_body", "sample_rate", "model", "model_source")  # what a protocol may add (wire.OpenAI)
# the level entry's keys the client owns: a caller's ``extra`` may not overwrite what was measured
LEVEL_KEYS = tuple(f.name for f in dataclasses.fields(LevelEntry) if f.name not in _SPREAD) \
    + arrivals.ARRIVAL_KEYS + PROTOCOL_KEYS


def set_rates(summary: dict, records: list[dict], count: int, wall: float | None, arrival: arrivals.Arrival) -> None:
    """The asked rate (the arrival's: "inf" is the closed loop) beside the achieved one: measured requests SENT
    (their bytes reached the socket; one the run's bound left unsent, or whose connection failed, is no load the
    server saw) per wall second of the measured phase."""
    summary["request_rate"] = arrival.asked_rate()
    sent = sum(1 for r in records if not r.get("warmup") and r.get("send_t") is not None)
    summary["achieved_rate"], why = arrivals.achieved_rate(sent, wall)
    if count and not sent:
        why = f"none of the {count} measured requests was sent (no connection, or the run's bound ran out)"
    if why:
        summary.setdefault("reasons", {})["achieved_rate"] = why

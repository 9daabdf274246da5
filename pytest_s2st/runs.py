"""The service run directory: its layout, writers, readers and per-request metrics (pytest-free).

    <root>/<case_id>/c<N>/     one concurrency level of one case (``level_dir``)
    out_dir/requests.jsonl     one JSON record per request, appended as each request ends
    out_dir/wav/<id>.wav       the audio of each completed response (ids c<N>-r<i>, warm-ups c<N>-w<i>)
    out_dir/summary.json       {"endpoint", "identity", "by_concurrency": {"<N>": {concurrency, summary, ...}}}

One directory may hold several concurrency levels (ids carry the level), as the seed's collect does
for ``--concurrency 1 4 8``. Writers never leave a half-written file under a final name. Readers
take back what a killed run left: a truncated last record is dropped, anything else unreadable is
an S2STError naming file:line. ``request_metrics`` is the one definition of TTFA / latency / RTF,
shared by the load summary and the quality gate's timing judgement.

Imports only the standard library: the load generator, the gate and the CLI all read runs through it.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import struct
import urllib.parse
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import S2STError
from .inputs import dumps, finite, load_json, read_bytes, show

MAX_RECORDS_BYTES = 1024 * 2**20  # one level's requests.jsonl (a record is ~1-40 KB with its chunk timeline)
MAX_SUMMARY_BYTES = 64 * 2**20


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a number that is not finite is missing evidence)")

REQUESTS = "requests.jsonl"
WAV_DIR = "wav"
SUMMARY = "summary.json"

SPEECH_PATH = "/v1/audio/speech"  # the protocol's default path (= service.server.SPEECH_PATH; a test checks)

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_HOSTNAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")
_DEFAULT_PORT = {"http": 80, "https": 443}
_URL_SAFE = "/%!$&'()*+,;=:@-._~?"  # what stays as written in a path or query; the rest is %-escaped


# --- names -----------------------------------------------------------------------------------

def level_name(concurrency: int) -> str:
    return f"c{concurrency}"


def request_id(concurrency: int, index: int, warmup: bool) -> str:
    return f"{level_name(concurrency)}-{'w' if warmup else 'r'}{index}"


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_NAME = 100


def safe_name(text: str) -> str:
    """Any user string (case id, test name, voice) -> ONE path component that stays under its root.

    Kept as is when already safe; otherwise unsafe characters become '_' and a hash of the original
    is appended, so two different inputs never share a folder ('a/b' and 'a_b' stay apart).
    """
    text = str(text)
    cleaned = _UNSAFE.sub("_", text).strip(".") or "_"
    if cleaned == text and len(text) <= MAX_NAME:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{cleaned[:MAX_NAME - 11]}-{digest}"


def level_dir(root: str | Path, case_id: str, concurrency: int, test: str | None = None) -> Path:
    """root/<case>[/<test>]/c<N>: each part through safe_name, so user data never leaves root."""
    parts = [safe_name(case_id)] + ([safe_name(test)] if test is not None else [])
    return Path(root).joinpath(*parts, level_name(concurrency))


def wav_path(out_dir: str | Path, rid: str) -> Path:
    if not isinstance(rid, str) or not _ID.match(rid):
        raise S2STError(f"request id {rid!r}: not a safe file name")
    return Path(out_dir) / WAV_DIR / f"{rid}.wav"


def normalize_endpoint(endpoint: Any) -> str:
    """The one spelling of a speech endpoint, used wherever one is sent to, compared or written:
    http(s)://host[:port]/path[?query] with lower-case scheme and host, no default port, no fragment,
    and the protocol's default path (/v1/audio/speech) where none is given. S2STError (one line) otherwise."""
    def bad(why: str) -> S2STError:
        return S2STError(f"endpoint {endpoint!r}: {why}; expected http(s)://host:port[/v1/audio/speech]")

    if not isinstance(endpoint, str):
        raise bad("not a string")
    try:
        parts = urllib.parse.urlsplit(endpoint.strip())
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # a port out of range or not a number, "Invalid IPv6 URL", ...
        raise bad("port is not a number in 1-65535" if "port" in str(exc).lower() else str(exc)) from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORT:
        raise bad(f"scheme {scheme or '(none)'!r} is not http or https")
    if parts.username is not None or parts.password is not None:
        raise bad("credentials in the URL are not sent")
    if port == 0:
        raise bad("port is not a number in 1-65535")
    host = _endpoint_host(host, bad)
    try:  # a lone surrogate cannot be %-escaped
        path = urllib.parse.quote(parts.path, safe=_URL_SAFE) if parts.path not in ("", "/") else SPEECH_PATH
        query = urllib.parse.quote(parts.query, safe=_URL_SAFE)
    except UnicodeError as exc:
        raise bad(f"path or query is not text ({exc.reason})") from None
    netloc = host if port in (None, _DEFAULT_PORT[scheme]) else f"{host}:{port}"
    return f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def _endpoint_host(host: str | None, bad: Any) -> str:
    if not host:
        raise bad("no host")
    if ":" in host:  # urlsplit took it from [brackets]
        try:
            return f"[{ipaddress.IPv6Address(host).compressed}]"
        except ValueError:
            raise bad(f"host {host!r} is not an IPv6 address") from None
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise bad(f"host {host!r} is not a host name") from None
    if not _HOSTNAME.fullmatch(ascii_host):
        raise bad(f"host {host!r} is not a host name")
    return ascii_host


# --- writers ---------------------------------------------------------------------------------

def append_record(out_dir: str | Path, record: dict) -> None:
    """Append one line and flush: a run killed later still leaves this record readable."""
    line = record_json(record) + "\n"
    with open(Path(out_dir) / REQUESTS, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()


WAV_HEADER_BYTES = 44


def wav_header(n_bytes: int, sample_rate: int) -> bytes:
    """The 44-byte RIFF header soundfile/libsndfile writes for ``n_bytes`` of mono int16 PCM."""
    if n_bytes % 2:
        raise ValueError(f"{n_bytes} bytes is not whole int16 samples")
    return struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + n_bytes, b"WAVE", b"fmt ", 16, 1, 1,
                       sample_rate, 2 * sample_rate, 2, 16, b"data", n_bytes)


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    """A mono 16-bit PCM WAV file: the 44-byte RIFF header soundfile/libsndfile writes, then the samples.

    Built by hand because the load generator makes one per response on its event loop's clock:
    soundfile produces the same bytes (a test checks) but holds the GIL ~0.1 ms per file, which
    delays the TTFA stamps of the other streams.
    """
    return wav_header(len(pcm), sample_rate) + pcm


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write under a temp name then rename: a half-written file never has the final name."""
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def write_wav_atomic(path: str | Path, pcm: bytes, sample_rate: int) -> None:
    """int16 little-endian PCM -> 16-bit WAV at ``path`` (atomic)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, wav_bytes(pcm, sample_rate))


def write_summary(
    out_dir: str | Path,
    summary: dict,
    *,
    concurrency: int,
    endpoint: str,
    identity: dict | None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Merge this concurrency level's entry into out_dir/summary.json (atomic replace); ``endpoint``
    is saved, and compared with the one saved before, in its normal spelling (normalize_endpoint)."""
    out_dir = Path(out_dir)
    endpoint = normalize_endpoint(endpoint)
    data = read_summary(out_dir)
    saved = data.get("endpoint")
    if saved is not None and _normal_or_same(saved) != endpoint:
        raise S2STError(f"{out_dir / SUMMARY}: holds runs against {saved}, not {endpoint}")
    data["endpoint"] = endpoint
    data["identity"] = identity
    level = {"concurrency": concurrency, "summary": summary, **(extra or {})}
    data.setdefault("by_concurrency", {})[str(concurrency)] = level
    path = out_dir / SUMMARY
    tmp = path.with_name(SUMMARY + ".tmp")
    tmp.write_text(dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _normal_or_same(endpoint: Any) -> Any:
    try:  # one saved by an older writer may not parse: then it is simply another endpoint
        return normalize_endpoint(endpoint)
    except S2STError:
        return endpoint


# --- readers ---------------------------------------------------------------------------------

def read_records(out_dir: str | Path) -> list[dict]:
    """All complete records of out_dir/requests.jsonl ([] when there is none), in file order.

    A truncated LAST line (writer killed mid-write) is dropped; a bad line anywhere else (not a
    JSON object with a string "id") is corruption and raises S2STError naming file:line.
    """
    path = Path(out_dir) / REQUESTS
    if not path.exists() and not path.is_symlink():
        return []
    text = read_bytes(path, "request records", MAX_RECORDS_BYTES).decode("utf-8", errors="replace")
    lines = text.split("\n")
    records: list[dict] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, parse_constant=_not_json)
            # every user keys records by id (WAV name, verdict pairing): one without is unusable
            if not isinstance(record, dict) or not isinstance(record.get("id"), str):
                raise ValueError("not a JSON object with a string 'id'")
        except (ValueError, RecursionError) as exc:
            if lineno == len(lines) and not text.endswith("\n"):
                break  # killed mid-write: the record was never finished
            why = "nested too deep" if isinstance(exc, RecursionError) else show(exc)
            raise S2STError(f"{show(str(path))}:{lineno}: unreadable request record ({why})") from None
        records.append(record)
    return records


def read_summary(out_dir: str | Path) -> dict:
    """out_dir/summary.json, or {} when there is none."""
    path = Path(out_dir) / SUMMARY
    if not path.exists() and not path.is_symlink():
        return {}
    data = load_json(path, "summary", MAX_SUMMARY_BYTES)
    if not isinstance(data, dict):
        raise S2STError(f"{path}: unreadable summary (not a JSON object)")
    return data


@dataclass
class Run:
    """One run dir: request records by id, the summary, and where each WAV is."""

    path: Path
    records: dict[str, dict]
    summary: dict[str, Any]
    problem: str | None = None  # why this run cannot be used at all

    def wav(self, rid: str) -> Path:
        rel = self.records.get(rid, {}).get("wav")
        return self.path / rel if isinstance(rel, str) and rel else self.path / WAV_DIR / f"{rid}.wav"

    def saved_policy(self) -> dict | None:
        """The policy saved with the run: summary["policy"], or the same one on every concurrency level."""
        if isinstance(self.summary.get("policy"), dict):
            return self.summary["policy"]
        levels = self.summary.get("by_concurrency")
        found = [lv.get("policy") for lv in levels.values() if isinstance(lv, dict)] if isinstance(levels, dict) else []
        found = [p for p in found if isinstance(p, dict)]
        return found[0] if found else None


def load_run(path: str | Path) -> Run:
    """The run at ``path``; a missing dir or empty run is a Run with ``problem`` set, corruption raises."""
    path = Path(path)
    req = path / REQUESTS
    if not path.is_dir():
        return Run(path, {}, {}, f"{show(str(path))} is not a directory")
    if not req.exists() and not req.is_symlink():
        return Run(path, {}, {}, f"{show(str(req))} is missing")
    records = {r["id"]: r for r in read_records(path)}  # a retried id: the last record is the one kept
    summary = read_summary(path)
    if not records:
        return Run(path, {}, summary, f"{show(str(req))} holds no request records")
    return Run(path, records, summary)


# --- per-request metrics ---------------------------------------------------------------------

def _num(value: Any) -> bool:
    return finite(value) is not None  # JSON true is no time; NaN/inf is missing evidence (inputs.finite)


def request_metrics(record: dict) -> dict[str, float | None]:
    """ttfa_s / latency_s / rtf of one record; None where it failed or lacks the timestamps.

    ttfa_s    = the record's own ttfa_s when not null, else first_audio_t - send_t
    latency_s = done_t - send_t
    rtf       = latency_s / audio_seconds   (audio_seconds > 0)
    Each duration must be a finite number in [0, MAX_DURATION_S] (inputs.finite): NaN, inf, a string,
    a negative time or one of 1e308 s is missing evidence, never a number.
    """
    if record.get("status") != "ok":
        return {"ttfa_s": None, "latency_s": None, "rtf": None}
    send, first, done, audio = (record.get(k) for k in ("send_t", "first_audio_t", "done_t", "audio_seconds"))
    own = record.get("ttfa_s")
    if own is not None:  # the record's own ttfa_s, when it holds one, is the one: garbage there is no evidence
        ttfa = _duration(own)
    else:
        ttfa = _duration(first - send) if _num(first) and _num(send) else None
    latency = _duration(done - send) if _num(done) and _num(send) else None
    audio = _duration(audio)
    rtf = finite(latency / audio) if latency is not None and audio is not None and audio > 0 else None
    return {"ttfa_s": ttfa, "latency_s": latency, "rtf": rtf}


class Timeline(Sequence):
    """A record's chunk timeline ``[[t, nbytes], ...]`` as the load generator holds it: two arrays, 16
    bytes a chunk (a list of [float, int] lists costs ~130), so a long stream's arrivals stay small.
    Reads as the list it stands for (index, iterate, compare); ``to_list()`` is what requests.jsonl gets."""

    __slots__ = ("_t", "_n")

    def __init__(self, chunks: Any = ()) -> None:
        self._t, self._n = array("d"), array("q")
        for t, n in chunks:
            self.add(t, n)

    def add(self, t: float, nbytes: int) -> None:
        self._t.append(t)
        self._n.append(nbytes)

    def __len__(self) -> int:
        return len(self._t)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [[t, n] for t, n in zip(self._t[i], self._n[i])]
        return [self._t[i], self._n[i]]

    def __iter__(self) -> Any:
        return ([t, n] for t, n in zip(self._t, self._n))

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, (list, Timeline)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like the list it stands for

    def to_list(self) -> list[list]:
        return list(self)

    def __repr__(self) -> str:
        return f"Timeline({self.to_list()!r})"


def record_json(record: dict) -> str:
    """One requests.jsonl line (no newline): a Timeline is written as its list."""
    def default(value: Any) -> Any:
        if isinstance(value, Timeline):
            return value.to_list()
        raise TypeError(f"{type(value).__name__} is not JSON serializable")
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=default)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (e.g. in a server's message) cannot be UTF-8: escaped, still JSON
        text = json.dumps(record, separators=(",", ":"), default=default)
    return text


MAX_DURATION_S = 7 * 86400.0  # a request time or an audio length past a week is a corrupt record, not a measurement


def _duration(value: Any) -> float | None:
    """A duration from a record: finite, >= 0 and at most a week; else no evidence (None)."""
    out = finite(value)
    return out if out is not None and 0.0 <= out <= MAX_DURATION_S else None


# vLLM-Omni's default continuity threshold (vllm_omni/metrics/definitions.py
# AUDIO_CONTINUITY_DEFAULT_THRESHOLD_S): a worst deficit up to 0.1 s, inclusive, is "continuous".
CONTINUITY_THRESHOLD_S = 0.1
PLAYBACK_KEYS = ("underrun_s", "underrun_events", "underrun_longest_s", "continuity_ok", "gaps_s", "audio_duration_s")


def _no_playback(reason: str, audio: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(PLAYBACK_KEYS)
    out["audio_duration_s"] = audio
    out["reason"] = reason
    return out


def playback_metrics(record: dict, threshold_s: float = CONTINUITY_THRESHOLD_S) -> dict[str, Any]:
    """Streaming-playback metrics of one ok record, from its chunk timeline ``chunks`` = [[t, nbytes], ...]
    (client perf_counter seconds, int16 mono PCM at ``sample_rate``). Defined as vLLM-Omni defines them
    (vllm_omni/benchmarks/audio_continuity.py::compute_continuity_stats, PR #3618 "[Bench] Add audio-streaming
    continuity metric for TTS", and its hand-made-timeline unit tests; behaviour copied, not text):

    A player starts at the first NON-EMPTY chunk (t0; zero-byte chunks carry no audio and are dropped, as
    vLLM-Omni's timeline holds only non-empty chunks) and plays in real time. At each later chunk i:
        deficit_i = (t_i - t0) - seconds of audio received before chunk i
    underrun_s        = max(0, max_i deficit_i)      (vLLM-Omni ``max_underrun_s`` / ``audio_underrun_s``)
    underrun_events   = #{i > 0 : deficit_i > 0}     (vLLM-Omni ``underrun_event_count``; strictly late:
                        a chunk arriving exactly when the audio before it has played out is no event)
    continuity_ok     = underrun_s <= threshold_s    (vLLM-Omni ``is_continuous``, default 0.1 s, inclusive)
    underrun_longest_s = the longest single dry spell of a player that WAITS when dry and resumes at the
                        next chunk (ours: vLLM-Omni has no per-spell figure). That player's TOTAL dry time
                        equals underrun_s exactly (after chunk i its total is max(previous, deficit_i)),
                        so underrun_s is also the "total underrun"; tests check the identity.
    gaps_s            = arrival differences of consecutive non-empty chunks (none for a single chunk)
    audio_duration_s  = the record's audio_seconds

    A record without a usable timeline gives None for each (audio_duration_s aside) and a ``reason``.
    """
    audio = record.get("audio_seconds")
    audio = float(audio) if _num(audio) and audio > 0 else None
    if record.get("status") != "ok":
        return _no_playback("request did not complete ok")
    chunks, rate = record.get("chunks"), record.get("sample_rate")
    if not isinstance(chunks, (list, Timeline)):
        return _no_playback("record has no chunk timeline ('chunks' missing or not a list)", audio)
    if not _num(rate) or not isinstance(rate, int) or rate <= 0:
        return _no_playback(f"sample_rate {repr(rate)[:40]} is not a positive integer", audio)
    timeline = _audio_timeline(chunks)
    if isinstance(timeline, str):
        return _no_playback(timeline, audio)
    return {**_player(*timeline, 2 * rate, threshold_s), "audio_duration_s": audio, "reason": None}


def _audio_timeline(chunks: list | Timeline) -> tuple[list[float], list[int]] | str:
    """(arrival times, sizes) of a timeline's non-empty chunks, or why it is unusable."""
    times: list[float] = []
    sizes: list[int] = []
    last = None
    for i, chunk in enumerate(chunks):
        ok = isinstance(chunk, (list, tuple)) and len(chunk) == 2 and _num(chunk[0]) and chunk[0] == chunk[0] \
            and abs(chunk[0]) != float("inf") and isinstance(chunk[1], int) and not isinstance(chunk[1], bool) \
            and chunk[1] >= 0
        if not ok:
            return f"chunk {i} is not [seconds, bytes >= 0]: {str(chunk)[:60]}"
        if last is not None and chunk[0] < last:
            return f"chunk {i} arrived before chunk {i - 1} ({chunk[0]!r} < {last!r})"
        last = chunk[0]
        if chunk[1] > 0:
            times.append(float(chunk[0]))
            sizes.append(chunk[1])
    return (times, sizes) if times else "the chunk timeline holds no audio bytes"


def _player(times: list[float], sizes: list[int], bytes_per_s: int, threshold_s: float) -> dict[str, Any]:
    """The real-time player of playback_metrics over non-empty arrivals (int16 mono: 2 * rate bytes a second)."""
    t0 = times[0]
    received = 0  # bytes received before chunk i
    worst, events = 0.0, 0
    play_end = t0  # the waiting player: when the audio it holds runs out
    longest = 0.0
    for i, (t, n) in enumerate(zip(times, sizes)):
        if i > 0:
            deficit_bytes = (t - t0) * bytes_per_s - received  # vLLM-Omni's arithmetic, in bytes
            if deficit_bytes > 0:
                worst = max(worst, deficit_bytes / bytes_per_s)
                events += 1
            if t > play_end:
                longest = max(longest, t - play_end)
                play_end = t
        play_end += n / bytes_per_s
        received += n
    return {
        "underrun_s": worst,
        "underrun_events": events,
        "underrun_longest_s": longest,
        "continuity_ok": worst <= threshold_s,
        "gaps_s": [b - a for a, b in zip(times, times[1:])],
    }


__all__ = ["REQUESTS", "WAV_DIR", "SUMMARY", "SPEECH_PATH", "normalize_endpoint", "level_name", "request_id",
           "level_dir", "wav_path", "append_record", "wav_header", "wav_bytes", "Timeline", "record_json",
           "write_bytes_atomic", "write_wav_atomic", "write_summary",
           "read_records", "read_summary", "Run", "load_run", "request_metrics",
           "playback_metrics", "CONTINUITY_THRESHOLD_S"]

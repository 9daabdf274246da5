"""Independent quality scores, in the seed's JSON format, each bound to the PCM it scored.

    {"scorer_id": str,
     "baseline":  [{"id", "pcm_sha256", "error_rate", "speaker_similarity", ...}, ...],
     "candidate": [...]}

Every per-utterance metric of quality/scored.py (error_rate, speaker_similarity, ...) is a key of each
entry; it may be null, and an optional "<metric>_reason" then says why.
Extra keys (transcript, reference, error_metric, timings) are kept and written back untouched.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import S2STError
from ..inputs import dumps, finite, load_json, read_bytes, show
from .scored import score_fields

SIDES = ("baseline", "candidate")
SCORE_FIELDS = score_fields()  # quality/scored.py's per-utterance metrics


WAV_LIMIT = 2048 * 2**20  # one WAV file (datasets.Limits.audio_bytes: the same bound)


def read_wav(wav_path: str | Path, dtype: str = "int16", always_2d: bool = False,
             what: str = "WAV") -> tuple[Any, int]:
    """(samples, rate) of a WAV read through the bounded reader (inputs.read_bytes): a FIFO, a
    device or a directory named like a WAV is one S2STError line at once, never a read that blocks
    or never ends; a file libsndfile cannot decode is one line too."""
    import soundfile as sf  # lazy: heavy

    raw = read_bytes(wav_path, what, WAV_LIMIT)
    try:
        return sf.read(io.BytesIO(raw), dtype=dtype, always_2d=always_2d)
    except Exception as exc:  # noqa: BLE001 -- libsndfile's errors vary (LibsndfileError, RuntimeError)
        # LibsndfileError's own text names the in-memory buffer ("Error opening <_io.BytesIO object at 0x...>"):
        # its error_string is libsndfile's reason alone
        reason = getattr(exc, "error_string", None) or exc
        raise S2STError(f"{show(os.fspath(wav_path))}: cannot read {what}: {show(reason)}") from None


def pcm_sha256(wav_path: str | Path) -> str:
    """sha256 of the WAV's samples as little-endian int16 bytes: the same digest the load client
    computes over the PCM it received, so a score, a request record and a file can be matched."""
    data, _ = read_wav(wav_path, dtype="int16")
    return pcm_digest(data)


def pcm_digest(samples: Any) -> str:
    """sha256 of int16 samples as little-endian bytes (pcm_sha256 of samples already read)."""
    return hashlib.sha256(samples.astype("<i2", copy=False).tobytes()).hexdigest()


@dataclass
class Score:
    """One utterance's scores: values holds every SCORE_FIELDS name (None: unavailable, see reason());
    ``score.error_rate`` reads values["error_rate"]."""

    id: str
    pcm_sha256: str
    values: dict[str, float | None] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.values) - set(SCORE_FIELDS)
        if unknown:
            raise ValueError(f"not a scored metric: {', '.join(sorted(unknown))} (quality/scored.py)")
        self.values = {name: self.values.get(name) for name in SCORE_FIELDS}

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("values")
        if values is not None and name in SCORE_FIELDS:
            return values[name]
        raise AttributeError(name)

    def reason(self, name: str) -> str | None:
        value = self.extra.get(f"{name}_reason")
        return str(value) if value is not None else None

    def to_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "pcm_sha256": self.pcm_sha256, **self.values}
        out.update(self.extra)
        return out


@dataclass
class Scores:
    scorer_id: str
    baseline: dict[str, Score]
    candidate: dict[str, Score]
    identity: dict[str, Any] | None = None  # what the scorer_id stands for, when the scorer wrote it

    def side(self, name: str) -> dict[str, Score]:
        return self.baseline if name == "baseline" else self.candidate

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scorer_id": self.scorer_id}
        if self.identity is not None:
            out["scorer_identity"] = self.identity
        for side in SIDES:
            out[side] = [s.to_dict() for s in self.side(side).values()]
        return out

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path


def _score(item: Any, where: str) -> Score:
    if not isinstance(item, Mapping):
        raise S2STError(f"{where}: must be an object, got {type(item).__name__}")
    rid = item.get("id")
    if not isinstance(rid, str) or not rid:
        raise S2STError(f"{where}: 'id' must be a non-empty string, got {rid!r}")
    digest = item.get("pcm_sha256")
    if not isinstance(digest, str) or len(digest) != 64:
        raise S2STError(f"{where} ({rid}): 'pcm_sha256' must be a 64-hex-digit string, got {digest!r}")
    values = {}
    for name in SCORE_FIELDS:
        if name not in item:
            raise S2STError(f"{where} ({rid}): missing key {name!r} (use null when unavailable)")
        value = item[name]
        if value is not None and finite(value) is None:  # NaN/inf is missing evidence: null with a reason
            raise S2STError(f"{where} ({show(rid)}): {name} must be a finite number or null, got {show(repr(value))}")
        values[name] = None if value is None else finite(value)
    extra = {k: v for k, v in item.items() if k not in ("id", "pcm_sha256") + SCORE_FIELDS}
    return Score(rid, digest.lower(), values, extra)


def scores_from_mapping(data: Any, where: str) -> Scores:
    if not isinstance(data, Mapping):
        raise S2STError(f"{where}: scores must be a JSON object, got {type(data).__name__}")
    scorer_id = data.get("scorer_id")
    if not isinstance(scorer_id, str) or not scorer_id:
        raise S2STError(f"{where}: 'scorer_id' must be a non-empty string, got {scorer_id!r}")
    sides: dict[str, dict[str, Score]] = {}
    for side in SIDES:
        items = data.get(side)
        if not isinstance(items, list):
            raise S2STError(f"{where}: {side!r} must be a list, got {type(items).__name__}")
        by_id: dict[str, Score] = {}
        for i, item in enumerate(items):
            score = _score(item, f"{where}: {side}[{i}]")
            if score.id in by_id:
                raise S2STError(f"{where}: {side}[{i}]: duplicate id {score.id!r}")
            by_id[score.id] = score
        sides[side] = by_id
    identity = data.get("scorer_identity")
    return Scores(scorer_id, sides["baseline"], sides["candidate"], identity if isinstance(identity, dict) else None)


def load_scores(path: str | Path) -> Scores:
    return scores_from_mapping(load_json(path, "scores file"), show(str(path)))

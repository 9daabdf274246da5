"""The frozen quality policy: thresholds fixed before any candidate is measured, saved with each run.

A candidate judged under a policy whose fingerprint differs from the baseline's is INCONCLUSIVE,
so moving a threshold after seeing the numbers cannot turn a FAIL into a PASS.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from ..errors import S2STError
from ..inputs import closest, finite, load_json, load_yaml, show
from .scored import BY_KEY, UTTERANCE, later_keys, threshold_keys

# Thresholds on scored metrics (quality/scored.py's table): per-utterance ones need a frozen scorer_id.
SCORED_THRESHOLDS = threshold_keys(UTTERANCE)
# Thresholds recomputed from the run dirs themselves (WAV lengths, request timings).
RUN_THRESHOLDS = ("max_duration_change_pct", "max_ttfa_regression_pct", "min_improvement_pct", "min_snr_db")
# Keys added after policies were first saved: left out of to_dict (and the fingerprint) while unset,
# so every policy saved before them keeps its fingerprint.
LATER_KEYS = ("min_snr_db",) + later_keys()
SPEED_METRICS = ("rtf", "ttfa_s")
AGGREGATES = ("mean", "each")


def _scored_fields(cls: type) -> type:
    """Every threshold key of the scored-metric table becomes a field ``float | None = None``."""
    for key in threshold_keys():
        cls.__annotations__[key] = "float | None"
        setattr(cls, key, None)
    return cls


@dataclass(frozen=True)
@_scored_fields
class Policy:
    scorer_id: str | None = None
    min_improvement_pct: float | None = None  # speed_metric must improve by at least this much, every concurrency
    max_duration_change_pct: float | None = None  # |candidate - baseline| / baseline per utterance
    max_ttfa_regression_pct: float | None = None  # mean TTFA increase, every concurrency
    speed_metric: str = "rtf"  # what speedup and min_improvement_pct are measured on
    aggregate: str = "mean"  # per-utterance quality deltas: gate their mean, or "each" utterance
    # same request, same seed -> the same audio: SNR (dB) of the candidate's PCM against the baseline's
    # of the same id; for candidates that change how audio is delivered (streaming), not what is generated
    min_snr_db: float | None = None
    # then one field per threshold key of quality/scored.py (max_error_rate_increase, max_speaker_drop, min_bleu,
    # max_bleu_drop, ...), added by _scored_fields

    @classmethod
    def from_mapping(cls, data: Any, where: str) -> "Policy":
        if not isinstance(data, Mapping):
            raise S2STError(f"{where}: policy must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise S2STError(f"{where}: unknown policy key {show(repr(key))}{closest(key, known)}; "
                                f"known: {', '.join(sorted(known))}")
            if value is None:
                continue
            if key == "scorer_id":
                if not isinstance(value, str) or not value.strip():
                    raise S2STError(f"{where}: scorer_id must be a non-empty string, got {value!r}")
                values[key] = value.strip()
            elif key == "speed_metric":
                if value not in SPEED_METRICS:
                    raise S2STError(f"{where}: speed_metric must be one of {', '.join(SPEED_METRICS)}, got {value!r}")
                values[key] = value
            elif key == "aggregate":
                if value not in AGGREGATES:
                    raise S2STError(f"{where}: aggregate must be one of {', '.join(AGGREGATES)}, got {value!r}")
                values[key] = value
            else:
                number = finite(value)  # inf would be a threshold nothing crosses: a gate that cannot fail
                if number is None:
                    raise S2STError(f"{where}: {key} must be a finite number, got {show(repr(value))}")
                if number < 0:
                    raise S2STError(f"{where}: {key} must be >= 0, got {value!r}")
                upper = BY_KEY[key][0].upper if key in BY_KEY else None
                if upper is not None and number > upper:  # e.g. sacrebleu scores are in [0, 100]
                    raise S2STError(f"{where}: {key} must be <= {upper:g} ({BY_KEY[key][0].units}), got {value!r}")
                values[key] = number
        policy = cls(**values)
        if policy.scorer_id is None:
            needing = [k for k in SCORED_THRESHOLDS if getattr(policy, k) is not None]
            if needing:
                raise S2STError(f"{where}: scorer_id is required when {', '.join(needing)} is set")
        return policy

    @classmethod
    def load(cls, path: str | Path) -> "Policy":
        """A policy file: JSON, or YAML (.yaml/.yml)."""
        path = Path(path)
        load = load_yaml if path.suffix.lower() in (".yaml", ".yml") else load_json
        return cls.from_mapping(load(path, "policy"), show(str(path)))

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not (k in LATER_KEYS and v is None)}

    def fingerprint(self) -> str:
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def thresholds(self) -> dict[str, float]:
        """The thresholds that are set (None means not gated)."""
        return {k: getattr(self, k) for k in threshold_keys() + RUN_THRESHOLDS if getattr(self, k) is not None}

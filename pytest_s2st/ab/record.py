"""The A/B record: what an A/B mode writes into ``measurement.info["ab"]`` (``to_dict``) and the tables and verdicts
read back (``from_dict``): the paired change of the runtime and how it was measured."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

IN_PROCESS = "in one process"  # the in-process A/B's mode: its records carry no "mode" (they predate modes)
MEDIAN = "median"  # the default estimator (ab/estimators.py): its records carry no "estimator" (they predate them)


@dataclass
class ABRecord:
    ratio: float | None       # the paired candidate/baseline ratio (significance.Change), None without one
    low: float | None         # its 95 % interval
    high: float | None
    word: str                 # slower / faster / same / why there is no verdict
    pairs: int
    calls_per_round: int | None
    round_target_s: float | None
    method: str
    timing: str | None = None   # own time or wall time; None when no change was computed
    missing: str | None = None  # why there is no verdict (a side measured nothing)
    mode: str = IN_PROCESS      # the mode's name in the registry (pytest_s2st.ab.MODES)
    estimator: str = MEDIAN     # the estimator's name in its registry (pytest_s2st.ab.ESTIMATORS)
    details: dict[str, Any] = field(default_factory=dict)  # the mode's own fields (code versions: base, shas, rounds)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.mode == IN_PROCESS else {"mode": self.mode}
        if self.estimator != MEDIAN:
            out["estimator"] = self.estimator
        out.update(self.details)
        out.update(ratio=self.ratio, low=self.low, high=self.high, word=self.word, pairs=self.pairs,
                   calls_per_round=self.calls_per_round, round_target_s=self.round_target_s)
        if self.timing is not None:
            out["timing"] = self.timing
        out["method"] = self.method
        if self.missing is not None:
            out["missing"] = self.missing
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ABRecord":
        """The inverse of to_dict; a saved record's values are kept as saved (the readers check them: a hand-edited
        JSON), a key no field names goes to ``details``."""
        named = {f.name for f in fields(cls)} - {"details"}
        return cls(**{k: data.get(k) for k in ("ratio", "low", "high", "word", "pairs", "calls_per_round",
                                              "round_target_s", "method")},
                   timing=data.get("timing"), missing=data.get("missing"), mode=data.get("mode", IN_PROCESS),
                   estimator=data.get("estimator", MEDIAN),
                   details={k: v for k, v in data.items() if k not in named})


def record_of(s2st: Mapping[str, Any]) -> ABRecord | None:
    """The A/B record of a measurement dict; None when it has none."""
    ab = s2st.get("ab") if isinstance(s2st, Mapping) else None
    return ABRecord.from_dict(ab) if isinstance(ab, Mapping) else None

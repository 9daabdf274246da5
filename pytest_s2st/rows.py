"""A benchmark's rows as the tables and the compare read them (pytest-free): this run's ``Row``, and a saved run's
``SavedRow`` of typed ``SavedMetric`` entries, in the shape runner.Measurement.to_dict writes.

A saved file may be hand-edited, so reading one never fails: a part that is not an object reads as empty, an entry
that is not one is no entry ("not in the saved row"), and a value that is not a finite number is kept as saved,
for the compare to name as missing evidence."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .inputs import finite, show
from .measure.record import Metric
from .runtime_stats import saved_statistic


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is an object, else {} (a part of the wrong shape reads as empty)."""
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class SavedMetric:
    """One metric as saved (measure.record.Metric.to_dict): its value as saved (a number, or whatever a hand-edited
    file holds), how it was measured, why it is missing, and the method's details."""
    value: Any = None
    method: Any = "?"
    reason: Any = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any) -> SavedMetric | None:
        """The entry, or None where there is none: absent, not an object, or empty. Details that are not an object
        read as none."""
        if not isinstance(data, Mapping) or not data:
            return None
        return cls(data.get("value"), data.get("method", "?"), data.get("reason"), dict(mapping(data.get("details"))))

    def to_dict(self) -> dict[str, Any]:
        """Metric.to_dict's shape: value and method, the reason and details when there are any."""
        return Metric(self.value, self.method, self.reason, dict(self.details)).to_dict()

    @property
    def usable(self) -> float | None:
        """The value when it is usable evidence (inputs.finite); NaN, inf, a string -> None."""
        return finite(self.value)


@dataclass
class SavedRow:
    """A benchmark's (or a cascade stage's) metrics as saved, and what work it measured (work.work_of: read from the
    measurement's other fields, so not part of ``to_dict``; a stage's is its benchmark's)."""
    metrics: dict[str, SavedMetric] = field(default_factory=dict)
    work: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Any, work: Mapping[str, Any] | None = None) -> SavedRow:
        """A saved measurement (runner.Measurement.to_dict) or one of its stages, by its "metrics"; a part that is
        not an object is a row with no metrics, so a gate on it reports "not measured" instead of passing."""
        return cls.from_metrics(mapping(data).get("metrics"), work)

    @classmethod
    def from_metrics(cls, metrics: Any, work: Mapping[str, Any] | None = None) -> SavedRow:
        """A saved {metric: entry} mapping; an entry that is none (SavedMetric.from_dict) is left out."""
        entries = {key: SavedMetric.from_dict(entry) for key, entry in mapping(metrics).items()}
        return cls({key: entry for key, entry in entries.items() if entry is not None}, work)

    def to_dict(self) -> dict[str, Any]:
        return {"metrics": {key: entry.to_dict() for key, entry in self.metrics.items()}}

    def metric(self, key: str) -> SavedMetric | None:
        return self.metrics.get(key)

    def value(self, key: str) -> float | None:
        """The metric's usable value (SavedMetric.usable), None when it has none."""
        entry = self.metrics.get(key)
        return entry.usable if entry is not None else None

    def details(self, key: str) -> Mapping[str, Any]:
        entry = self.metrics.get(key)
        return entry.details if entry is not None else {}

    def reason(self, key: str) -> str:
        """Why the metric has no usable value, in one line."""
        entry = self.metrics.get(key)
        if entry is None:
            return "not in the saved row"
        if entry.value is not None and entry.usable is None:
            return f"value {show(repr(entry.value), 60)} is not a finite number (missing evidence)"
        return show(entry.reason or "no value")

    def statistic(self) -> str:
        """The statistic its runtime holds (runtime_stats.saved_statistic); ValueError when it names none known."""
        entry = self.metrics.get("runtime_s")
        return saved_statistic(entry.to_dict() if entry is not None else None)


def metric_value(metrics: Any, key: str) -> float | None:
    """The usable value of one metric of a saved {metric: entry} mapping (SavedRow.value)."""
    return SavedRow.from_metrics(metrics).value(key)


@dataclass
class Row:
    name: str          # test name, or "  <stage>" for a cascade's stage
    fullname: str      # pytest-benchmark's fullname (node id); stage rows add "::<stage>"
    metrics: Mapping[str, Mapping[str, Any]]  # metric -> Metric.to_dict()
    status: str = ""   # verdict of the test (PASS/FAIL/INCONCLUSIVE) or ""
    key: str = ""      # what compare matches on (identity, see rows_from); stage rows add "::<stage>"
    work: Mapping[str, Any] | None = None  # what the benchmark measured (work.work_of): a compare needs the same

    def as_saved(self) -> SavedRow:
        """This row read as it will be saved: the compare judges both sides alike."""
        return SavedRow.from_metrics(self.metrics, self.work)


def identity(s2st: Mapping[str, Any], fullname: str) -> str:
    """A saved benchmark's stable identity: the test file's name and the test's name with its case
    (``test_inference.py::test_inference[S2UT-tiny]``). Unlike pytest's node id it does not move with the
    rootdir, which pytest picks before plugin options exist (``--s2st-config /abs/x.yaml`` spelled with a
    space counts as a test path there). Runs saved before it existed fall back to the fullname."""
    return str(s2st.get("identity") or fullname)


def rows_from(name: str, fullname: str, s2st: Mapping[str, Any], status: str = "") -> list[Row]:
    from .work import work_of  # lazy: plugin load

    key = identity(s2st, fullname)
    work = work_of(s2st)
    rows = [Row(name, fullname, s2st.get("metrics", {}), status, key, work)]
    stages = s2st.get("stages", [])
    if len(stages) > 1:
        rows += [Row(f"  {st['name']}", f"{fullname}::{st['name']}", st.get("metrics", {}), "", f"{key}::{st['name']}",
                     work) for st in stages]
    return rows


def compared_rows(saved: Mapping[str, Any]) -> dict[str, SavedRow]:
    """A saved pytest-benchmark JSON benchmark entry -> {identity[::stage]: its saved row}.
    A hand-edited entry of the wrong shape gives what it can (SavedRow.from_dict)."""
    extra = saved.get("extra_info") if isinstance(saved, Mapping) else None
    s2st = extra.get("s2st") if isinstance(extra, Mapping) else None
    if not isinstance(s2st, Mapping) or not s2st:
        return {}
    from .work import work_of  # lazy: plugin load

    key = identity(s2st, str(saved.get("fullname")))
    work = work_of(s2st)
    out = {key: SavedRow.from_dict(s2st, work)}
    stages = s2st.get("stages")
    for stage in stages if isinstance(stages, list) else []:
        if isinstance(stage, Mapping) and isinstance(stage.get("name"), str):
            out[f"{key}::{stage['name']}"] = SavedRow.from_dict(stage, work)
    return out

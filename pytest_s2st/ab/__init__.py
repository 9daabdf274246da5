"""A/B modes: ways of timing a candidate against a baseline round by round, each judged on the paired ratio.

- ``record``: ``ABRecord``, what a mode writes into ``measurement.info["ab"]`` (``to_dict``; ``from_dict`` reads
  it back);
- ``mode``: ``ABMode``, what the tables ask of a mode (name, title, legend, what it judges against, its rows'
  rendering; the shared table in ``table``);
- one module per mode: ``inprocess`` (``s2st_benchmark(..., baseline=)``), ``code_versions`` (``--s2st-ab-base``);
- ``estimators``: ``Estimator``, how every mode turns its paired rounds into the ratio, interval and word, and its
  registry ``ESTIMATORS`` (``register_estimator``; chosen by ``ab_estimator=NAME`` or ``--s2st-ab-estimator``);
- here: the registry ``MODES`` (name -> mode) and the A/B tables, one per mode, of a session's rows.

Adding a mode: a module with an ``ABMode`` subclass (and whatever measures it), its instance in ``MODES`` below
(or ``register``), and the records it writes named by its ``name``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..judging import ab_change
from ..report import wrap
from . import code_versions, inprocess
from .estimators import ESTIMATORS, Estimator, register_estimator  # noqa: F401 -- the estimators' registry
from .mode import ABMode
from .record import IN_PROCESS, MEDIAN, ABRecord, record_of

MODES: dict[str, ABMode] = {m.name: m for m in (inprocess.MODE, code_versions.MODE)}


def register(mode: ABMode) -> None:
    """Adds ``mode`` to MODES under its name (replacing one of the same name)."""
    MODES[mode.name] = mode


def paired_modes() -> dict[str, ABMode]:
    """The modes a test may choose (``s2st_benchmark(..., baseline=, ab_mode=NAME)``): those that pair rounds."""
    return {name: mode for name, mode in MODES.items() if type(mode).pair is not ABMode.pair}


def mode_of(record: ABRecord) -> ABMode:
    """The mode that wrote ``record``; a name no mode has reads as the in-process A/B (as before modes had names)."""
    return MODES.get(record.mode, MODES[IN_PROCESS])


def _legend(mode: ABMode, estimator: str) -> str:
    """The mode's legend; for rows judged by another estimator than the default, what theirs is."""
    if estimator == MEDIAN:
        return mode.legend
    known = ESTIMATORS.get(estimator)
    said = known.description() if known is not None else "not registered in this session"
    return f"{mode.legend}. Estimator {estimator} here, not the median: {said}"


def _by_mode(rows: Sequence[tuple]) -> dict[tuple[str, ABMode, str], list]:
    """Rows (name, measurement dict, ...) with an A/B record, grouped by (their table's title, their mode, their
    estimator's name): a table's legend says how its ratios were had."""
    out: dict[tuple[str, ABMode, str], list] = {}
    for row in rows:
        record = record_of(row[1])
        if record is not None:
            mode = mode_of(record)
            title = mode.title(record) + ("" if record.estimator == MEDIAN else f", estimator {record.estimator}")
            out.setdefault((title, mode, str(record.estimator)), []).append(row)
    return out


def terminal_tables(records: Sequence[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, list[str]]]:
    """(title, lines) of each mode's A/B table over ``records`` (name, measurement dict): its rows, then its legend;
    a mode none of whose rows has a paired change shows nothing."""
    out = []
    for (title, mode, estimator), rows in _by_mode(records).items():
        lines = mode.render(rows)
        if lines:
            out.append((title, lines + wrap([_legend(mode, estimator)])))
    return out


def markdown_ab(records: Sequence[tuple[str, Mapping[str, Any], str]]) -> list[str]:
    """The A/B rows as GitHub-flavoured markdown (a job summary, a pull-request comment): one table per mode under
    its title, its legend after it; ``records``: (name, measurement dict, verdict)."""
    out: list[str] = []
    for (title, mode, estimator), rows in _by_mode([r for r in records if ab_change(r[1]) is not None]).items():
        out += [f"### s2st: {title}", ""] + mode.markdown(rows) + ["", _legend(mode, estimator), ""]
    return out

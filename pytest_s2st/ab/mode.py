"""What an A/B mode tells the tables and the verdicts: its name (the record's ``mode``), its table's title and
legend, what the candidate was judged against, and how its rows render (the shared table unless it overrides)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..report import WIDTH
from . import table
from .estimators import DEFAULT, Estimator
from .record import ABRecord


@dataclass
class PairContext:
    """What a mode chosen per test may need beyond the two sides' rounds: the two pipelines as the test gave
    them (to re-create a side elsewhere, e.g. in a worker process), the samples, the runner's RunSettings, and the
    estimator its paired rounds are judged by (``ab_estimator=NAME``, --s2st-ab-estimator)."""
    candidate: Any
    baseline: Any
    samples: Sequence[Any]
    settings: Any
    estimator: Estimator = DEFAULT


class ABMode:
    name: str = ""                 # the key in pytest_s2st.ab.MODES, saved as the record's "mode"
    legend: str = ""               # printed under its table: what the ratio is and how it was measured
    against: str = "the baseline"  # what a limit line says the candidate was judged against

    def title(self, record: ABRecord) -> str:
        """The table's title (after "s2st: ") for a row of this mode."""
        raise NotImplementedError

    def pair(self, candidate: Any, baseline: Any, context: PairContext) -> Any:
        """The paired rounds the runner drives for ``s2st_benchmark(..., baseline=, ab_mode=NAME)``, from each side's
        ``rounds.TimedRounds`` (their untimed passes done). What the runner asks of them: ``calibrate(round_s)``;
        the driving ``TimedRounds`` has (``setup``, ``run``, ``more``, ``last_round_s``, ``finish``, ``run_all``,
        a ``timer`` to set); ``baseline``: the baseline side's ``TimedRounds`` (its runtime metrics), and
        ``record(round_s)``: the ``ABRecord`` saved as ``info["ab"]``. None: this mode is not chosen per test
        (the code-version mode runs the whole session)."""
        return None

    def render(self, records: Sequence[tuple[str, Mapping[str, Any]]], width: int = WIDTH) -> list[str]:
        """The terminal table of this mode's rows: (name, measurement dict)."""
        return table.render_ab(records, width)

    def markdown(self, rows: Sequence[tuple[str, Mapping[str, Any], str]]) -> list[str]:
        """The markdown table of this mode's rows: (name, measurement dict, verdict)."""
        return table.markdown_ab(rows)

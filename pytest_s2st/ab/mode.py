"""What an A/B mode tells the tables and the verdicts: its name (the record's ``mode``), its table's title and
legend, what the candidate was judged against, and how its rows render (the shared table unless it overrides)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..report import WIDTH
from . import table
from .record import ABRecord


class ABMode:
    name: str = ""                 # the key in pytest_s2st.ab.MODES, saved as the record's "mode"
    legend: str = ""               # printed under its table: what the ratio is and how it was measured
    against: str = "the baseline"  # what a limit line says the candidate was judged against

    def title(self, record: ABRecord) -> str:
        """The table's title (after "s2st: ") for a row of this mode."""
        raise NotImplementedError

    def render(self, records: Sequence[tuple[str, Mapping[str, Any]]], width: int = WIDTH) -> list[str]:
        """The terminal table of this mode's rows: (name, measurement dict)."""
        return table.render_ab(records, width)

    def markdown(self, rows: Sequence[tuple[str, Mapping[str, Any], str]]) -> list[str]:
        """The markdown table of this mode's rows: (name, measurement dict, verdict)."""
        return table.markdown_ab(rows)

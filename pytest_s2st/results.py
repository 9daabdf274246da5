"""What a session measured and judged, as the pytest_s2st_session_ready hook receives it (pytest-free)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Record:
    """One s2st_benchmark row of the session, as saved: what the pytest_s2st_session_ready hook receives."""

    name: str          # the test's name
    nodeid: str        # its plain nodeid (without xdist's "@group" suffix)
    measurement: dict  # Measurement.to_dict(): the row's metrics, stages and info, as in the saved JSON
    verdict: str       # PASS, FAIL or INCONCLUSIVE; "" when no gate judged it


@dataclass(frozen=True)
class SessionVerdicts:
    """The session's own verdicts, final when pytest_s2st_session_ready is called."""

    inconclusive: list[tuple[str, list[str]]]  # (nodeid, reasons) of every INCONCLUSIVE test
    regressions: list[str]  # --s2st-compare-fail limits crossed
    unchecked: list[str]    # --s2st-compare-fail limits that could not be checked (they fail too)
    not_written: list[str]  # files that could not be written: --s2st-summary's, and an export's that appends here
    #                         one line naming its file (the session then fails and lists it, as for its own)

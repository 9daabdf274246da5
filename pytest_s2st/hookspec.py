"""pytest-s2st's hooks, for plugins and conftest.py files (registered by plugin.py's pytest_addhooks).

Under pytest-xdist a row is measured in the worker that ran its test (pytest_s2st_row_measured runs there);
the controller gathers every worker's rows and alone calls pytest_s2st_session_ready and pytest_s2st_table.
A conftest that must also load without pytest-s2st marks its implementations ``optionalhook=True``.
They are called through hookcall.call_hook: an implementation that raises is one line (the hook, its file:line)
that fails the session, and what was measured is still printed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .results import Record, SessionVerdicts

if TYPE_CHECKING:
    from .runner import Measurement


@pytest.hookspec
def pytest_s2st_row_measured(config: pytest.Config, item: pytest.Item, measurement: Measurement) -> None:
    """An s2st_benchmark row was measured (every pass, translation scores and gate included) and is about to be
    saved into pytest-benchmark's extra_info (the saved JSON) and the session's tables.

    ``measurement``: the runner's Measurement, to change in place. A metric added to ``measurement.quality``
    (name -> measure.record.Metric) must be a row of the metric table (pytest_s2st/metrics.py METRICS): then it
    shows in the JSON's ``metrics``, the extra table (a ``column`` metric), compare and budgets; a name the table
    lacks fails the test, naming it. Anything else a plugin keeps goes into ``measurement.info`` (a JSON-able
    value under a key of its own): it is saved at the top of the row's ``extra_info["s2st"]``.
    """


@pytest.hookspec
def pytest_s2st_session_ready(config: pytest.Config, rows: list[Record], verdicts: SessionVerdicts) -> None:
    """The session's rows and verdicts are final (after the compare and the --s2st-summary files, before the
    exit status is set): the place for exports such as a CI job summary. Called once, on the controller under xdist.
    An export that cannot write its file appends one line naming it to ``verdicts.not_written``: the session then
    fails and lists it under "s2st files not written", as it does for its own files.

    ``rows``: a results.Record per s2st_benchmark row (name, nodeid, measurement as saved, verdict);
    ``verdicts``: results.SessionVerdicts (inconclusive tests, regressions, unchecked limits, files not written).
    """


@pytest.hookspec
def pytest_s2st_table(config: pytest.Config, name: str, lines: list[str]) -> None:
    """A table of the terminal summary is about to be printed; a plugin may change or add ``lines`` in place.

    ``name``: "inference" (the extra table and its notes), "ab" (an A/B table and its legend, one call per A/B
    mode), "compare" (compared with the saved run) or "service" (the service table, its gate lines and the
    evidence folder).
    """

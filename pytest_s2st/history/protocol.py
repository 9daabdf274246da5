"""``Store``: what a results-history backend must do -- the calls the pytest glue (``plugin_history.py``), the CLI
(``cli/history.py``) and the trend site (``site.py``) make on it. A backend is any class with these (no base class
to inherit); ``store.register_store`` makes a URL scheme open it.
"""
from __future__ import annotations

from typing import Any, Iterable, Protocol, runtime_checkable

from .records import Document, Verdict
from .series import Entry, SeriesKey


@runtime_checkable
class Store(Protocol):
    where: str  # how messages name the store (a URL's password never in it)

    def append(self, doc: Document) -> int | None:
        """Adds one run with its rows; its id, or None when a run of the same ``doc.run.key`` is already kept."""

    def append_all(self, docs: Iterable[Document]) -> tuple[int, int]:
        """Adds many runs: (added, already kept)."""

    def run_count(self) -> int:
        """Runs kept."""

    def keys(self, branch: str | None = None, machine: str | None = None) -> list[SeriesKey]:
        """Every series with a point in a run of ``branch`` and ``machine`` (None: any), sorted."""

    def series(self, key: SeriesKey, branch: str | None = None, machine: str | None = None) -> list[Entry]:
        """The series' entries in ``series.run_order`` of their runs, ties by arrival."""

    def run_groups(self) -> list[tuple[str | None, str, int]]:
        """(branch, machine, runs) of every pair that holds runs: branches sorted, no branch last, then machine."""

    def verdicts(self, benchmark: str) -> dict[int, list[Verdict]]:
        """The benchmark's verdicts by run id."""

    def close(self) -> None: ...

    def __enter__(self) -> "Store": ...

    def __exit__(self, *exc: Any) -> None: ...

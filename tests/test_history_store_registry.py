"""The history store is one registered object chosen by URL scheme: a store defined only here (in memory,
implementing ``protocol.Store`` and nothing else) under ``memory://`` is opened by ``open_store``, accepted by
``--s2st-history`` and ``s2st-history --db``, and writes the same trend site as SQLite; an unknown scheme is the
same one line as ever."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import pytest

from pytest_s2st import settings
from pytest_s2st.cli import history as cli
from pytest_s2st.errors import S2STError
from pytest_s2st.history import store
from pytest_s2st.history.protocol import Store
from pytest_s2st.history.records import Document, Verdict
from pytest_s2st.history.series import Entry, SeriesKey, run_order
from pytest_s2st.history.site import write_site

KEPT: dict[str, dict[int, Document]] = {}  # memory://NAME -> its runs by id (a "server" the opens share)


class MemoryStore:
    """A whole history store in a dict: only what protocol.Store asks, nothing inherited."""

    def __init__(self, url: str) -> None:
        self.where = url
        self.runs = KEPT.setdefault(url, {})

    def append(self, doc: Document) -> int | None:
        if any(kept.run.key == doc.run.key for kept in self.runs.values()):
            return None
        run_id = len(self.runs) + 1
        self.runs[run_id] = doc
        return run_id

    def append_all(self, docs: Iterable[Document]) -> tuple[int, int]:
        ids = [self.append(doc) for doc in docs]
        added = sum(run_id is not None for run_id in ids)
        return added, len(ids) - added

    def run_count(self) -> int:
        return len(self.runs)

    def _runs(self, branch: str | None, machine: str | None) -> list[tuple[int, Document]]:
        return [(i, d) for i, d in self.runs.items()
                if branch in (None, d.run.branch) and machine in (None, d.run.machine)]

    def keys(self, branch: str | None = None, machine: str | None = None) -> list[SeriesKey]:
        keys = {SeriesKey(p.benchmark, p.part, p.metric, p.statistic) for _, d in self._runs(branch, machine)
                for p in d.points}
        return sorted(keys, key=lambda k: (k.benchmark, k.part, k.metric, k.statistic))

    def series(self, key: SeriesKey, branch: str | None = None, machine: str | None = None) -> list[Entry]:
        runs = sorted(self._runs(branch, machine), key=lambda item: (run_order(item[1].run), item[0]))
        return [Entry(i, d.run, p) for i, d in runs for p in d.points
                if SeriesKey(p.benchmark, p.part, p.metric, p.statistic) == key]

    def run_groups(self) -> list[tuple[str | None, str, int]]:
        groups = Counter((d.run.branch, d.run.machine) for d in self.runs.values())
        return sorted(((b, m, n) for (b, m), n in groups.items()), key=lambda g: (g[0] is None, g[0] or "", g[1]))

    def verdicts(self, benchmark: str) -> dict[int, list[Verdict]]:
        out = {i: [v for v in d.verdicts if v.benchmark == benchmark] for i, d in self.runs.items()}
        return {i: found for i, found in out.items() if found}

    def close(self) -> None:
        pass

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@pytest.fixture
def memory(monkeypatch):
    """``memory://`` registered for this test only (the registry restored after it)."""
    monkeypatch.setattr(store, "STORES", dict(store.STORES))
    KEPT.clear()
    store.register_store("memory", lambda url, create: MemoryStore(url))


def _saved_runs(folder: Path, n: int = 12) -> list[Path]:
    """Saved runs of two benchmarks over n commits (the runtime 10 % slower from commit 8), a service level with its
    gate verdict, on two branches and none."""
    folder.mkdir()
    out = []
    for i in range(n):
        when, branch = f"2026-11-01T{i:02d}:00:00+00:00", None if i == 0 else "main" if i % 4 else "dev"
        doc = {"datetime": when, "machine_info": {"node": "ci"},
               "commit_info": {"id": f"{i:040x}", "time": when, "branch": branch},
               "benchmarks": [
                   {"fullname": "t.py::test_model", "extra_info": {"s2st": {"metrics": {"runtime_s": {
                       "value": (1.1 if i >= 8 else 1.0) * (1 + 0.001 * (i % 3)), "method": "timer",
                       "details": {"statistic": "mean", "rounds": 9, "precision": 0.01}}}}}},
                   {"fullname": "t.py::test_load[c4]", "extra_info": {"s2st_service": {
                       "concurrency": 4, "summary": {"ttfa_s": {"mean": 0.2 + 0.01 * i}, "throughput": 3.5},
                       "verdict": {"status": "PASS" if i % 2 else "INCONCLUSIVE", "reasons": ["r"]}}}}]}
        out.append(folder / f"run{i:02d}.json")
        out[-1].write_text(json.dumps(doc))
    return out


def test_a_registered_scheme_opens_its_store_and_the_setting_accepts_it(memory):
    opened = store.open_store("memory://one")
    assert isinstance(opened, MemoryStore) and isinstance(opened, Store)
    assert settings.history_url("memory://one") == "memory://one"
    assert store.store_kind("memory://x").form == "memory://..."
    # the built-in ones are Stores as well, and a plain path is still SQLite
    assert store.store_kind("h.sqlite") is store.store_kind("sqlite:///h.sqlite") is store.STORES["sqlite:///"]
    assert store.store_kind("postgres://u@h/d") is store.store_kind("postgresql://u@h/d")


def test_sqlite_is_a_protocol_store(tmp_path):
    with store.open_store(tmp_path / "h.sqlite") as db:
        assert isinstance(db, Store)


def test_the_cli_imports_checks_and_writes_the_same_site_as_sqlite(memory, tmp_path, capsys):
    runs = _saved_runs(tmp_path / "runs")
    for db in ("memory://cli", str(tmp_path / "h.sqlite")):
        assert cli.main(["--db", db, "import", *map(str, runs[::-1])]) == 0  # arrival is not history order
        assert cli.main(["--db", db, "import", str(runs[0])]) == 0  # kept once
        assert "0 run(s) added, 1 already kept; 12 run(s)" in capsys.readouterr().out
        assert cli.main(["--db", db, "check", "--branch", "main"]) == 1  # the runtime's +10 % on main
        assert "t.py::test_model [total] runtime_s mean: FAIL" in capsys.readouterr().out
    assert len(KEPT["memory://cli"]) == 12
    with store.open_store("memory://cli") as mem, store.open_store(tmp_path / "h.sqlite") as lite:
        assert mem.keys() == lite.keys() and mem.run_groups() == lite.run_groups()
        for key in lite.keys():
            assert mem.series(key) == lite.series(key) and mem.series(key, "dev") == lite.series(key, "dev")
        assert mem.verdicts("t.py::test_load[c4]") == lite.verdicts("t.py::test_load[c4]")
        assert mem.verdicts("t.py::test_model") == lite.verdicts("t.py::test_model") == {}
        pages = {name: write_site(db, tmp_path / name) for name, db in (("mem", mem), ("lite", lite))}
    assert len(pages["mem"]) >= 4 and [p.relative_to(tmp_path / "mem") for p in pages["mem"]] == \
        [p.relative_to(tmp_path / "lite") for p in pages["lite"]]
    for mine, theirs in zip(pages["mem"], pages["lite"]):
        assert mine.read_bytes() == theirs.read_bytes(), mine  # the same pages, byte for byte


def test_a_session_keeps_its_rows_in_a_registered_store(memory, pytester):
    pytester.makepyfile(test_bench="def test_model(s2st_benchmark):\n    s2st_benchmark(sum, [range(100)])\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--s2st-history=memory://session",
                                          "--s2st-min-rounds=3", "--s2st-history-fail=runtime_s")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*value(s) of 1 benchmark(s) kept in memory://session (run 1)"])
    assert [d.run.source for d in KEPT["memory://session"].values()] == ["session"]


def test_an_unknown_scheme_is_the_same_one_line_and_lists_the_registered_ones(memory):
    with pytest.raises(S2STError) as exc:
        store.open_store("mysql://x/y")
    assert str(exc.value) == "mysql://x/y: a history is a file path, sqlite:///PATH, postgresql://... or memory://..."
    with pytest.raises(ValueError) as exc:
        settings.history_url("sqlite://two-slashes")
    assert str(exc.value) == ("must be a path, sqlite:///PATH, postgresql://... or memory://..., "
                              "got 'sqlite://two-slashes'")


def test_without_it_the_lines_are_todays():
    assert "memory://" not in store.STORES
    with pytest.raises(S2STError) as exc:
        store.open_store("mysql://x/y")
    assert str(exc.value) == "mysql://x/y: a history is a file path, sqlite:///PATH or postgresql://..."
    with pytest.raises(ValueError) as exc:
        settings.history_url("mysql://h/db")
    assert str(exc.value) == "must be a path, sqlite:///PATH or postgresql://..., got 'mysql://h/db'"

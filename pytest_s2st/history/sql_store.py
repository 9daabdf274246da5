"""What the two SQL backends share: one schema, versioned migrations and the SQL over it (``SQLStore``).

Each backend (``sqlite_store.py``, ``postgres_store.py``) differs only in the id column, the parameter marker and
how a writer takes the lock: SQLite in WAL mode takes the write lock up front (``BEGIN IMMEDIATE``) and waits for
it; PostgreSQL serialises writers on an advisory lock. A run is keyed by its document's hash, so importing the same
file twice adds nothing.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, fields
from operator import attrgetter
from typing import Any, Iterable, Iterator

from ..errors import S2STError
from .records import Document, Point, Run, Verdict
from .series import Entry, SeriesKey, run_order

BATCH_S = 1.0  # an import's transaction at most this long: another writer waits for it (WAIT_S) meanwhile
WAIT_S = 60.0  # a writer waits this long for another's lock before it gives up (two CI jobs at once)

_RUN_FIELDS = tuple(f.name for f in fields(Run))
_POINT_FIELDS = tuple(f.name for f in fields(Point))
_VERDICT_FIELDS = tuple(f.name for f in fields(Verdict))
_point_values = attrgetter(*_POINT_FIELDS)  # one C call a row, not a generator (1.3 M rows in a large import)
_verdict_values = attrgetter(*_VERDICT_FIELDS)
_COLUMN = {"key": "run_key", "commit": "commit_id"}  # names that are SQL keywords


def _col(name: str) -> str:
    return _COLUMN.get(name, name)


# Each migration is a list of statements; {id} is the dialect's auto-increment key. Append, never edit.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE s2st_runs (id {id}, run_key TEXT NOT NULL UNIQUE, run_time TEXT NOT NULL, machine TEXT NOT NULL,"
        " commit_id TEXT, branch TEXT, commit_time TEXT, dirty BOOLEAN, arch TEXT, cpu TEXT, python TEXT,"
        " torch TEXT, source TEXT)",
        "CREATE TABLE s2st_points (run_id BIGINT NOT NULL REFERENCES s2st_runs(id), benchmark TEXT NOT NULL,"
        " part TEXT NOT NULL, metric TEXT NOT NULL, statistic TEXT NOT NULL, value DOUBLE PRECISION,"
        " low DOUBLE PRECISION, high DOUBLE PRECISION, n INTEGER, method TEXT, reason TEXT)",
        "CREATE INDEX s2st_points_series ON s2st_points (benchmark, part, metric, statistic)",
        "CREATE TABLE s2st_verdicts (run_id BIGINT NOT NULL REFERENCES s2st_runs(id), benchmark TEXT NOT NULL,"
        " kind TEXT NOT NULL, verdict TEXT NOT NULL, detail TEXT NOT NULL)",
    ),
    (  # the A/B's base commit (a paired ratio's other side) and the commit's subject line (the trend page's hover)
        "ALTER TABLE s2st_runs ADD COLUMN base_commit TEXT",
        "ALTER TABLE s2st_runs ADD COLUMN subject TEXT",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


class SQLStore:
    """A ``protocol.Store`` over a DB-API connection; a backend sets the dialect hooks."""
    dialect = ""
    _marker = "?"
    _id_type = ""

    errors: tuple[type[BaseException], ...] = ()  # the driver's own errors: each becomes one line naming the store

    def __init__(self, conn: Any, where: str) -> None:
        self.conn = conn
        self.where = where
        with self._one_line("cannot prepare its tables"):
            self._migrate()

    @contextlib.contextmanager
    def _one_line(self, doing: str) -> Iterator[None]:
        """A database error (permission denied for schema public, a read-only file, a lost server) as one line that
        names the store and what failed; the caller keeps what it had measured."""
        try:
            yield
        except self.errors as exc:
            text = str(exc).strip().splitlines()
            why = text[0] if text else type(exc).__name__
            if "readonly database" in why:  # SQLite's words for a file or folder this process may not write
                why = "the history database is read-only here (its file or its folder)"
            raise S2STError(f"{self.where}: {doing}: {why}") from None

    # --- dialect hooks ---------------------------------------------------------------------------
    def _begin_write(self, cur: Any) -> None:
        raise NotImplementedError

    def _sql(self, text: str) -> str:
        return text.replace("?", self._marker)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "SQLStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- schema ----------------------------------------------------------------------------------
    def version(self, cur: Any) -> int:
        cur.execute("SELECT version FROM s2st_schema")
        row = cur.fetchone()
        return int(row[0]) if row else 0

    def _migrate(self) -> None:
        cur = self.conn.cursor()
        try:
            self._begin_write(cur)
            cur.execute("CREATE TABLE IF NOT EXISTS s2st_schema (version INTEGER NOT NULL)")
            have = self.version(cur)
            if have > SCHEMA_VERSION:
                raise S2STError(f"{self.where}: history schema version {have} is newer than this pytest-s2st "
                                f"understands ({SCHEMA_VERSION}): upgrade pytest-s2st")
            for statements in MIGRATIONS[have:]:
                for statement in statements:
                    cur.execute(statement.format(id=self._id_type))
            if have == 0:
                cur.execute(self._sql("INSERT INTO s2st_schema (version) VALUES (?)"), (SCHEMA_VERSION,))
            elif have < SCHEMA_VERSION:
                cur.execute(self._sql("UPDATE s2st_schema SET version = ?"), (SCHEMA_VERSION,))
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise

    # --- writing ---------------------------------------------------------------------------------
    def append(self, doc: Document) -> int | None:
        """Adds one run with its rows in one transaction; None when that run is already kept."""
        with self._one_line("cannot append the run"):
            return self._append(doc)

    def append_all(self, docs: Iterable[Document]) -> tuple[int, int]:
        """Adds many runs, (added, already kept): one transaction a batch of up to BATCH_S seconds, since a commit
        writes every index page the run touched and a run touches one page per series (one transaction a run took
        11 of the 19 s of importing 300 saved runs, batches 4). A document that cannot be read (the iterator
        raises) first commits the runs before it; a database error loses only the open batch."""
        added = kept = 0
        with self._one_line("cannot append the runs"):
            cur = self.conn.cursor()
            began = None
            try:
                for doc in docs:
                    if began is None:
                        self._begin_write(cur)
                        began = time.monotonic()
                    if self._insert(cur, doc) is None:
                        kept += 1
                    else:
                        added += 1
                    if time.monotonic() - began >= BATCH_S:
                        self.conn.commit()
                        began = None
            except self.errors:
                self.conn.rollback()
                raise
            finally:
                self.conn.commit()  # what was added before a document that could not be read is kept
        return added, kept

    def _append(self, doc: Document) -> int | None:
        cur = self.conn.cursor()
        try:
            self._begin_write(cur)
            run_id = self._insert(cur, doc)
            self.conn.commit()
            return run_id
        except BaseException:
            self.conn.rollback()
            raise

    def _insert(self, cur: Any, doc: Document) -> int | None:
        """One run and its rows inside the caller's transaction; None when that run is already kept."""
        run = asdict(doc.run)
        cols = ", ".join(_col(f) for f in _RUN_FIELDS)
        marks = ", ".join("?" for _ in _RUN_FIELDS)
        cur.execute(self._sql(f"INSERT INTO s2st_runs ({cols}) VALUES ({marks}) "
                              "ON CONFLICT (run_key) DO NOTHING RETURNING id"), [run[f] for f in _RUN_FIELDS])
        row = cur.fetchone()
        if row is None:
            return None
        run_id = int(row[0])
        cur.executemany(self._sql(f"INSERT INTO s2st_points (run_id, {', '.join(_POINT_FIELDS)}) VALUES "
                                  f"(?, {', '.join('?' for _ in _POINT_FIELDS)})"),
                        [(run_id, *_point_values(p)) for p in doc.points])
        cur.executemany(self._sql(f"INSERT INTO s2st_verdicts (run_id, {', '.join(_VERDICT_FIELDS)}) VALUES "
                                  f"(?, {', '.join('?' for _ in _VERDICT_FIELDS)})"),
                        [(run_id, *_verdict_values(v)) for v in doc.verdicts])
        return run_id

    # --- reading ---------------------------------------------------------------------------------
    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        with self._one_line("cannot read"):
            cur = self.conn.cursor()
            cur.execute(self._sql(sql), list(params))
            rows = cur.fetchall()
            self.conn.commit()  # ends the read transaction (PostgreSQL opens one for every statement)
            return rows

    def _filters(self, branch: str | None, machine: str | None) -> tuple[str, list[Any]]:
        where, params = [], []
        if branch is not None:
            where.append("r.branch = ?")
            params.append(branch)
        if machine is not None:
            where.append("r.machine = ?")
            params.append(machine)
        return "".join(f" AND {w}" for w in where), params

    def run_count(self) -> int:
        return int(self._rows("SELECT COUNT(*) FROM s2st_runs")[0][0])

    def keys(self, branch: str | None = None, machine: str | None = None) -> list[SeriesKey]:
        extra, params = self._filters(branch, machine)
        rows = self._rows("SELECT DISTINCT p.benchmark, p.part, p.metric, p.statistic FROM s2st_points p "
                          f"JOIN s2st_runs r ON r.id = p.run_id WHERE 1 = 1{extra} "
                          "ORDER BY p.benchmark, p.part, p.metric, p.statistic", params)
        return [SeriesKey(*row) for row in rows]

    def branches(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT DISTINCT branch FROM s2st_runs WHERE branch IS NOT NULL "
                                         "ORDER BY branch")]

    def run_groups(self) -> list[tuple[str | None, str, int]]:
        """(branch, machine, runs) of every pair that holds runs."""
        rows = self._rows("SELECT branch, machine, COUNT(*) FROM s2st_runs GROUP BY branch, machine")
        return sorted(((r[0], r[1], int(r[2])) for r in rows), key=lambda g: (g[0] is None, g[0] or "", g[1]))

    def machines(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT DISTINCT machine FROM s2st_runs ORDER BY machine")]

    def runs(self) -> dict[int, tuple[Run, tuple[float, float]]]:
        """Every run by id with its order key, read once per store and kept: a site reads a thousand series of the
        same runs (reading each run's columns again per series took most of a large site's time)."""
        cached = getattr(self, "_runs_cache", None)
        if cached is not None and len(cached) == self.run_count():
            return cached
        out = {}
        for row in self._rows(f"SELECT id, {', '.join(_col(f) for f in _RUN_FIELDS)} FROM s2st_runs"):
            fields_ = dict(zip(_RUN_FIELDS, row[1:]))
            if fields_["dirty"] is not None:
                fields_["dirty"] = bool(fields_["dirty"])  # SQLite keeps booleans as 0/1
            run = Run(**fields_)
            out[int(row[0])] = (run, run_order(run))
        self._runs_cache = out
        return out

    def series(self, key: SeriesKey, branch: str | None = None, machine: str | None = None) -> list[Entry]:
        """The series in the order the runs were measured: the commit's instant (UTC), then the run's, then
        arrival."""
        extra, params = self._filters(branch, machine)
        point_cols = ", ".join(f"p.{f}" for f in _POINT_FIELDS)
        rows = self._rows(f"SELECT p.run_id, {point_cols} FROM s2st_points p JOIN s2st_runs r "
                          "ON r.id = p.run_id WHERE p.benchmark = ? AND p.part = ? AND p.metric = ? AND "
                          f"p.statistic = ?{extra}", [key.benchmark, key.part, key.metric, key.statistic, *params])
        runs = self.runs()
        if any(int(row[0]) not in runs for row in rows):  # appended by another writer since: read them again
            self._runs_cache = None
            runs = self.runs()
        out = [(runs[int(row[0])][1], int(row[0]), Entry(int(row[0]), runs[int(row[0])][0], Point(*row[1:])))
               for row in rows]
        out.sort(key=lambda item: (item[0], item[1]))
        return [entry for _, _, entry in out]

    def verdicts(self, benchmark: str) -> dict[int, list[Verdict]]:
        out: dict[int, list[Verdict]] = {}
        for row in self._rows(f"SELECT run_id, {', '.join(_VERDICT_FIELDS)} FROM s2st_verdicts WHERE benchmark = ? "
                              "ORDER BY run_id", [benchmark]):
            out.setdefault(int(row[0]), []).append(Verdict(*row[1:]))
        return out

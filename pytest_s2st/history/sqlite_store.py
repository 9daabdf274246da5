"""The SQLite backend: a path or ``sqlite:///PATH`` is one file (Python's ``sqlite3``), the default history.

Writers are safe side by side: WAL mode, and the write lock taken up front (``BEGIN IMMEDIATE``) and waited for.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ..errors import S2STError
from ..inputs import show
from .sql_store import WAIT_S, SQLStore

PREFIX = "sqlite:///"


def open_sqlite(url: str, create: bool = True) -> "SQLiteStore":
    """The store at a path or ``sqlite:///PATH`` (``sqlite:////abs`` is ``/abs``); ``create=False`` (reading: check,
    site) refuses a file that is not there instead of creating an empty history that every gate would then read as
    "nothing past its threshold"."""
    text = url
    if text.startswith(PREFIX):
        text = text[len(PREFIX) - 1:] if text.startswith(PREFIX + "/") else text[len(PREFIX):]
    if not text or "\0" in text or "\n" in text:
        raise S2STError(f"{show(text)}: not a usable path for the history database")
    if not create and not Path(text).exists():
        raise S2STError(f"{show(text)}: no history database there (--s2st-history or s2st-history import creates one)")
    return SQLiteStore(Path(text))


class SQLiteStore(SQLStore):
    dialect = "sqlite"
    errors = (sqlite3.Error,)
    _marker = "?"
    _id_type = "INTEGER PRIMARY KEY AUTOINCREMENT"

    def __init__(self, path: Path) -> None:
        where = show(str(path))
        if path.exists() and not path.is_file():
            raise S2STError(f"{where}: the history database is not a regular file")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=WAIT_S, isolation_level=None)  # transactions are ours
            conn.execute("PRAGMA journal_mode=WAL")  # readers never block the writer, nor it them
            # WAL's own durable mode: a power cut may lose the last run, never corrupt the file (a sync a commit
            # took 6 of the 24 s of an import of 100 saved runs)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA cache_size=-131072")  # 128 MiB of pages: a large history's index stays in memory
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise S2STError(f"{where}: not a history database ({exc})") from None
        except (OSError, sqlite3.Error) as exc:
            raise S2STError(f"{where}: cannot open the history database: {exc}") from None
        try:
            super().__init__(_SQLiteConnection(conn), where)
        except S2STError as exc:
            conn.close()
            if "file is not a database" in str(exc):
                raise S2STError(f"{where}: not a history database (file is not a database)") from None
            raise

    def _begin_write(self, cur: Any) -> None:
        cur.execute("BEGIN IMMEDIATE")  # the write lock now: two writers wait for each other instead of failing


class _SQLiteConnection:
    """sqlite3 in autocommit mode with explicit transactions: commit/rollback only when one is open."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def cursor(self) -> Any:
        return self._conn.cursor()

    def commit(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("COMMIT")

    def rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()

"""The PostgreSQL backend: ``postgresql://USER@HOST/DB`` (or ``postgres://``), through psycopg 3 (the ``history``
extra). Writers serialise on an advisory lock; a message never shows the URL's password.
"""
from __future__ import annotations

import urllib.parse
from typing import Any

from ..errors import S2STError
from ..inputs import show
from .sql_store import WAIT_S, SQLStore

_PG_LOCK = 0x5325_7354  # advisory lock id of the migration step ("S2sT")


def open_postgres(url: str, create: bool = True) -> "PostgresStore":
    """The server's store; ``create`` is moot (its tables are made on first use, as a file's are)."""
    return PostgresStore(url)


class PostgresStore(SQLStore):
    dialect = "postgresql"
    _marker = "%s"
    _id_type = "BIGSERIAL PRIMARY KEY"

    def __init__(self, url: str) -> None:
        where = _redacted(url)
        try:
            urllib.parse.urlsplit(url).port
        except ValueError:
            raise S2STError(f"{where}: the port is not a number from 0 to 65535") from None
        try:
            import psycopg  # lazy: optional
        except ImportError:
            raise S2STError(f"{where}: a PostgreSQL history needs psycopg: "
                            "pip install 'pytest-s2st[history]'") from None
        self.errors = (psycopg.Error,)
        try:
            conn = psycopg.connect(url, connect_timeout=int(WAIT_S))
        except psycopg.Error as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else exc
            raise S2STError(f"{where}: cannot connect: {why}") from None
        super().__init__(conn, where)

    def _begin_write(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_LOCK,))


def _redacted(url: str) -> str:
    """A URL for messages: the password never printed."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<history URL>"
    if parts.password is None:
        return show(url)
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return show(urllib.parse.urlunsplit(parts._replace(netloc=netloc)))

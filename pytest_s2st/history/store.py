"""Which results-history store a URL names: the registry of backends by URL scheme, and ``open_store``.

    sqlite_store.py    a path or sqlite:///PATH: one file (Python's sqlite3), the default
    postgres_store.py  postgresql://USER@HOST/DB (psycopg 3: the ``history`` extra)
    sql_store.py       what those two share: one schema, versioned migrations, the SQL
    protocol.py        ``Store``: what a backend must do; series.py: the types a backend and its callers share

A backend is a module with an opener ``(url, create) -> Store`` and one ``register_store`` call; the built-in ones
are registered below, their modules imported only when a URL of theirs is opened. ``open_store`` and the setting's
check (``settings.history_url``) both read ``STORES``, so a registered scheme is accepted by ``--s2st-history``
and ``s2st-history --db`` alike, and every usage message lists it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable

from ..errors import S2STError
from ..inputs import show
from .postgres_store import open_postgres
from .protocol import Store
from .series import Entry, SeriesKey, instant  # noqa: F401 (re-exported: callers import them from here)
from .sqlite_store import open_sqlite

DEFAULT_PATH = ".benchmarks/s2st-history.sqlite"

Opener = Callable[[str, bool], Store]


@dataclass(frozen=True)
class StoreKind:
    opener: Opener  # (url, create) -> the store; create=False (reading): refuse one that is not there
    form: str  # how usage messages name its URLs ("postgresql://...")


STORES: dict[str, StoreKind] = {}  # what a URL starts with ("postgresql://") -> its backend
PLAIN_PATH = "sqlite:///"  # a text without "://" is a path, opened by this entry's backend


def register_store(schemes: str | Iterable[str], opener: Opener, form: str | None = None) -> None:
    """Opens URLs of ``schemes`` with ``opener``: a scheme is ``"jsonl"`` (URLs ``jsonl://...``) or what its URLs
    start with when it asks for more (``"sqlite:///"``); aliases share one entry. ``form`` names them in usage
    messages (default: the first scheme's ``SCHEME://...``). A later registration of a scheme replaces it."""
    prefixes = [s if "://" in s else f"{s}://" for s in ([schemes] if isinstance(schemes, str) else schemes)]
    kind = StoreKind(opener, form or f"{prefixes[0]}...")
    for prefix in prefixes:
        STORES[prefix] = kind


def store_kind(url: str) -> StoreKind | None:
    """The backend of ``url`` (the longest registered start it has; a plain path: ``PLAIN_PATH``'s), None when no
    registered scheme names it."""
    if "://" not in url:
        return STORES.get(PLAIN_PATH)
    starts = [prefix for prefix in STORES if url.startswith(prefix)]
    return STORES[max(starts, key=len)] if starts else None


def forms(first: str) -> str:
    """``first`` and every registered form, as a usage message lists them: 'a path, sqlite:///PATH or
    postgresql://...'."""
    names = [first, *dict.fromkeys(kind.form for kind in STORES.values())]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else first


def open_store(url: str | os.PathLike | None = None, create: bool = True) -> Store:
    """The store at ``url`` (default: ``DEFAULT_PATH``); ``create=False`` (reading: check, site) refuses one that
    is not there instead of creating an empty history that every gate would then read as "nothing past its
    threshold"."""
    text = os.fspath(url) if url is not None else DEFAULT_PATH
    kind = store_kind(text)
    if kind is None:
        raise S2STError(f"{show(text)}: a history is {forms('a file path')}")
    return kind.opener(text, create)


def _open_sqlite(url: str, create: bool) -> Store:
    return open_sqlite(url, create)


def _open_postgres(url: str, create: bool) -> Store:
    return open_postgres(url, create)


register_store(PLAIN_PATH, _open_sqlite, "sqlite:///PATH")
register_store(("postgresql", "postgres"), _open_postgres, "postgresql://...")

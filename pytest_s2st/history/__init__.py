"""Results history (pytest-free): every run's rows kept in a database, series over commits, change points.

    records.py  a saved pytest-benchmark document (ours or plain) -> one Run, its Points and Verdicts
    store.py    which database a URL names: the registry of backends by scheme (STORES, register_store),
                open_store; one module a backend (sqlite_store.py, postgres_store.py; their SQL in sql_store.py)
    protocol.py what a backend must do (Store); series.py the types it and its callers share (SeriesKey, Entry)
    changes.py  change points on a series and the window threshold over its history
    site.py     the static trend site (plain SVG, no JavaScript library, works offline)
"""

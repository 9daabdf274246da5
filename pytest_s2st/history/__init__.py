"""Results history (pytest-free): every run's rows kept in a database, series over commits, change points.

    records.py  a saved pytest-benchmark document (ours or plain) -> one Run, its Points and Verdicts
    store.py    the database: SQLite (standard library) or PostgreSQL (psycopg), one schema, versioned migrations
    changes.py  change points on a series and the window threshold over its history
    site.py     the static trend site (plain SVG, no JavaScript library, works offline)
"""

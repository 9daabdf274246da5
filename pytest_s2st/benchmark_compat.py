"""The only places pytest-s2st touches pytest-benchmark internals, each named and checked.

pytest-benchmark has no public API for (a) the timer its fixture uses, which our per-stage clocks
must share so the stage times and its own table agree, and (b) the saved runs that
``--benchmark-compare`` loaded, which our compare table and the quality gate's baseline read.
If a release renames them, these functions raise one clear line instead of a silent
no-comparison; tests/test_benchmark_compat.py fails loudly on such a release.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from .errors import S2STError


def _changed(what: str) -> S2STError:
    try:
        from importlib.metadata import version

        release = version("pytest-benchmark")
    except Exception:  # noqa: BLE001 -- only for the message
        release = "?"
    return S2STError(f"pytest-benchmark {release}: {what} is gone; pytest-s2st needs it "
                     "(see pytest_s2st/benchmark_compat.py)")


def fixture_timer(benchmark: Any) -> Callable[[], float]:
    """The clock of the ``benchmark`` fixture (BenchmarkFixture._timer)."""
    timer = getattr(benchmark, "_timer", None)
    if not callable(timer):
        raise _changed("BenchmarkFixture._timer")
    return timer


def timer_name(timer: Callable[[], float]) -> str:
    return f"{getattr(timer, '__module__', '')}.{getattr(timer, '__name__', repr(timer))}".lstrip(".")


def compared_mapping(config: Any) -> Mapping[str, Mapping[str, Any]]:
    """{saved file: {fullname: saved benchmark}} that --benchmark-compare loaded ({} without it).

    BenchmarkSession (config._benchmarksession) fills ``compared_mapping`` in handle_loading.
    """
    session = getattr(config, "_benchmarksession", None)
    if session is None:
        if config.pluginmanager.hasplugin("benchmark"):
            raise _changed("config._benchmarksession")
        return {}
    if not hasattr(session, "compared_mapping"):
        raise _changed("BenchmarkSession.compared_mapping")
    return session.compared_mapping or {}

# pytester's in-process runs restore sys.modules afterwards; torch's C extension and the Python
# modules that register operators with it must not be dropped and re-imported between sessions
# (that breaks with "SystemError: bad call flags" or duplicate registrations), so the parts of
# torch the plugin touches are imported once here, before any inner session.
import os

import pytest
import torch
import torch.utils.flop_counter  # noqa: F401

torch.use_deterministic_algorithms(True, warn_only=True)  # imports torch._inductor / _dynamo once
torch.use_deterministic_algorithms(False)
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def staged(tmp_path_factory):
    """The tiny fairseq models, datasets and configs, staged once per test session."""
    from pytest_s2st.tiny import fairseq_tiny

    root = tmp_path_factory.getbasetemp() / "fairseq-stage"
    fairseq_tiny.default_configs(root)
    return root


@pytest.fixture
def one_thread():
    """Tiny-model timings and outputs at one torch thread (modules opt in with usefixtures)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# `make test` runs the suite on every core (pytest-xdist) and then, alone, the tests that bound a
# duration or a rate (a hang limit, a timeout, an arrival rate, a precision reached in time): on
# oversubscribed cores those would measure the contention, not the code.
SERIAL_MODULES = {
    "test_fuzz_datasets", "test_runner_rounds", "test_service_arrivals", "test_service_bounds",
    "test_service_client", "test_service_faults", "test_service_openai", "test_service_openai_faults",
    "test_service_hostile",  # hostile servers against 1-3 s timeouts and 20-40 s run bounds
    "test_measure_memory",  # the 1 ms RSS sampler must get a CPU within a 20 ms allocation window
}  # not test_history_commits: its histories assert FLOPs alone (the clock's rates are tools/history_power.py's)


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: bounds a duration or a rate; `make test` runs it after the "
                                       "parallel run, on its own (tests/conftest.py SERIAL_MODULES)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:  # before -m selects: `-m serial` / `-m "not serial"` see these marks
        if getattr(item, "module", None) is not None and item.module.__name__.rsplit(".", 1)[-1] in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)


# Third-party plugins the venv brings that no inner session uses: hypothesis's (it imports hypothesis, 0.8 s),
# hydra's (fairseq's hydra-core) and anyio's. Loaded, they made a bare `pytest --co` take 2.0 s instead of 0.5 s,
# and the suite starts hundreds of pytest processes (pytester's, the README's commands, xdist and A/B workers).
UNUSED_PLUGINS = "-p no:hypothesispytest -p no:hydra_pytest -p no:anyio"


def _without_unused_plugins(monkeypatch):
    given = os.environ.get("PYTEST_ADDOPTS", "")
    if UNUSED_PLUGINS not in given:
        monkeypatch.setenv("PYTEST_ADDOPTS", f"{given} {UNUSED_PLUGINS}".strip())


@pytest.fixture(scope="session")
def _suite_cache(tmp_path_factory):
    """One $S2ST_CACHE_DIR for the whole suite, shared by the xdist workers (build_once locks and renames):
    pytester gives each session its own HOME, so each session that collected the embedded demo built the tiny
    models again in ~/.cache (12 s for a `pytest --co`). Tests of the cache itself set their own."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if base.name.startswith("popen-gw") else base) / "s2st-cache"


@pytest.fixture(autouse=True)
def _not_an_xdist_worker_inside(monkeypatch):
    """Under `make test` (-n auto) this process is an xdist worker, and xdist says so in the environment
    (PYTEST_XDIST_WORKER, ...). The sessions tests start (pytester, in-process or subprocess) are not
    workers: pytest-benchmark would read the inherited variable and disable itself there."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _cheap_inner_sessions(monkeypatch, _suite_cache):
    """What every session a test starts inherits: the unused plugins left out, the suite's one model cache."""
    _without_unused_plugins(monkeypatch)
    if not os.environ.get("S2ST_CACHE_DIR"):
        monkeypatch.setenv("S2ST_CACHE_DIR", str(_suite_cache))


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytest's own, after which the inner sessions leave the unused plugins out: pytester clears
    PYTEST_ADDOPTS when it starts, so the autouse fixture's setting is put back."""
    _without_unused_plugins(monkeypatch)
    return pytester


def pytest_collection_finish(session):
    """What collection imported (pytest, numpy, often torch and fairseq) is moved out of the garbage collector's
    reach: every s2st_benchmark case starts with a full collection (its start RSS must not hold an earlier test's
    garbage), and hundreds of in-process pytester sessions in one worker each rescanned these objects."""
    import gc

    gc.collect()
    gc.freeze()

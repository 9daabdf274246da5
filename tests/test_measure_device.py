"""Device resolution (cpu / cuda / npu / auto) and determinism helpers (seeds, threads, runtime facts)."""
from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from pytest_s2st.errors import S2STError
from pytest_s2st.measure import device as device_mod
from pytest_s2st.measure.determinism import runtime_info, seed_everything, set_threads
from pytest_s2st.measure.device import CudaDevice, Device, NpuDevice, resolve_device

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20


def run_fresh(code: str, **env: str) -> dict:
    """Run `code` in a fresh interpreter (nothing imported yet); it prints one JSON line."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    full_env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cuda_here() -> bool:
    import torch

    return torch.cuda.is_available()


def one_line_error(asked: str) -> str:
    with pytest.raises(S2STError) as err:
        resolve_device(asked)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"--s2st-device={asked}:")
    return msg


# --- device ---------------------------------------------------------------------------------------------


def test_cpu_and_measure_modules_do_not_import_torch():
    out = run_fresh(
        "import json, sys\n"
        "import pytest_s2st.measure.memory, pytest_s2st.measure.flops, pytest_s2st.measure.determinism\n"
        "from pytest_s2st.measure.device import resolve_device\n"
        "d = resolve_device('cpu')\n"
        "d.synchronize(); d.reset_peak()\n"
        "print(json.dumps({'name': d.name, 'torch': 'torch' in sys.modules, 'peak': d.peak_mib().to_dict()}))"
    )
    assert out["name"] == "cpu" and out["torch"] is False
    assert out["peak"] == {"value": None, "method": "none", "reason": "no device memory on cpu"}


def test_cpu_device_api():
    d = resolve_device("cpu")
    assert type(d) is Device and d.torch_device == "cpu" and d.describe() == {"name": "cpu"}
    assert d.synchronize() is None and d.reset_peak() is None
    assert d.peak_mib().value is None


def test_cuda_here_is_one_line_error_or_a_real_cuda_device():
    if cuda_here():  # a GPU machine: the real path must work
        import torch

        d = resolve_device("cuda")
        d.reset_peak()
        x = torch.ones(64 * MIB // 4, device=d.torch_device)
        d.synchronize()
        assert d.peak_mib().value >= 64 and d.describe()["torch_device_name"]
        del x
    else:  # this CPU VM
        assert "CUDA is not available" in one_line_error("cuda")
        one_line_error("cuda:0")


def test_npu_without_torch_npu_is_one_line_error_and_disables_autoload():
    assert importlib.util.find_spec("torch_npu") is None, "torch_npu must not be installed in this venv"
    out = run_fresh(
        "import json, os\n"
        "from pytest_s2st.errors import S2STError\n"
        "from pytest_s2st.measure.device import resolve_device\n"
        "try:\n"
        "    resolve_device('npu'); msg = None\n"
        "except S2STError as e:\n"
        "    msg = str(e)\n"
        "print(json.dumps({'msg': msg, 'autoload': os.environ.get('TORCH_DEVICE_BACKEND_AUTOLOAD')}))"
    )
    assert out["autoload"] == "0"
    assert out["msg"] == (
        "--s2st-device=npu: torch_npu cannot be loaded (Ascend CANN missing?): No module named 'torch_npu'"
    )


def test_npu_in_process_after_torch_is_imported():
    import torch  # noqa: F401  (torch already loaded: autoload env must be left alone)

    before = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
    assert "torch_npu cannot be loaded" in one_line_error("npu")
    assert os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == before


def test_auto_is_cpu_here_or_cuda_on_a_gpu_machine():
    d = resolve_device("auto")
    assert d.name == ("cuda" if cuda_here() else "cpu")


@pytest.mark.parametrize("asked", ["gpu", "cpu:0", "cuda:x", "npu:-1", ""])
def test_bad_device_values_are_one_line_errors(asked):
    assert "expected one of auto, cpu, cuda, npu" in one_line_error(asked)


def _fake_torch(monkeypatch, attr: str, n_devices: int = 2):
    """torch with a working `torch.<attr>` accelerator API that records calls (cuda/npu absent on this VM)."""
    log = []
    api = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: n_devices,
        current_device=lambda: 0,
        set_device=lambda i: log.append(("set", i)),
        synchronize=lambda i=None: log.append(("sync", i)),
        reset_peak_memory_stats=lambda i=None: log.append(("reset", i)),
        max_memory_allocated=lambda i=None: 3 * MIB + MIB // 2,
        get_device_name=lambda i=None: f"Fake {attr} {i}",
    )
    fake = types.ModuleType("torch")
    fake.__version__ = "0.fake"
    fake.version = types.SimpleNamespace(cuda="12.x")
    setattr(fake, attr, api)
    if attr != "cuda":
        fake.cuda = types.SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", fake)
    return log


def test_cuda_device_wiring_with_stand_in_torch(monkeypatch):
    log = _fake_torch(monkeypatch, "cuda")
    d = resolve_device("cuda:1")
    assert isinstance(d, CudaDevice) and d.torch_device == "cuda:1"
    d.reset_peak()
    d.synchronize()
    peak = d.peak_mib()
    assert peak.value == 3.5 and peak.method == "torch.cuda.max_memory_allocated"
    assert log == [("set", 1), ("reset", 1), ("sync", 1)]  # cuda:1 made current: models built as "cuda" land there
    assert d.describe() == {"name": "cuda", "index": 1, "torch": "0.fake", "torch_device_name": "Fake cuda 1"}
    assert "only 2 cuda device(s) visible" in one_line_error("cuda:2")
    assert resolve_device("auto").torch_device == "cuda:0"


def test_npu_device_wiring_with_stand_in_torch_npu(monkeypatch):
    _fake_torch(monkeypatch, "npu")
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    d = resolve_device("npu")
    assert isinstance(d, NpuDevice) and d.torch_device == "npu:0"
    assert d.peak_mib().method == "torch.npu.max_memory_allocated" and d.peak_mib().value == 3.5
    # auto picks npu only because torch_npu is already imported
    assert resolve_device("auto").name == "npu"


def test_npu_load_failure_other_than_import_is_one_line(monkeypatch):
    def broken():
        raise OSError("libascendcl.so: cannot open shared object file\nsecond line")

    monkeypatch.setattr(device_mod, "_load_torch_npu", broken)
    assert one_line_error("npu").endswith("(Ascend CANN missing?): libascendcl.so: cannot open shared object file")


# --- determinism ----------------------------------------------------------------------------------------


def test_seed_everything_without_torch_does_not_import_it():
    out = run_fresh(
        "import json, random, sys\n"
        "import numpy as np\n"
        "from pytest_s2st.measure.determinism import seed_everything, set_threads, runtime_info\n"
        "seed_everything(5); a = [random.random(), float(np.random.rand())]\n"
        "seed_everything(5); b = [random.random(), float(np.random.rand())]\n"
        "print(json.dumps({'same': a == b, 'threads': set_threads(2), 'info': runtime_info(),\n"
        "                  'torch': 'torch' in sys.modules}))",
        OMP_NUM_THREADS="3",
    )
    assert out == {"same": True, "threads": None, "torch": False,
                   "info": {"threads": None, "torch": None, "omp_num_threads": "3"}}


def test_seed_everything_with_torch_is_reproducible_and_deterministic():
    import torch

    old_threads = torch.get_num_threads()
    try:
        seed_everything(3)
        a = (random.random(), float(np.random.rand()), torch.randn(4))
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        seed_everything(3)
        b = (random.random(), float(np.random.rand()), torch.randn(4))
        assert a[:2] == b[:2] and torch.equal(a[2], b[2])
        seed_everything(4)
        assert not torch.equal(torch.randn(4), a[2])
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(old_threads)


def test_seeding_imports_neither_inductor_nor_dynamo():
    """torch.use_deterministic_algorithms imports inductor (and dynamo) to set inductor's flag: 1.2 s, and a loaded
    dynamo sends the dispatch pass down torch's wrapped, slower path. Seeding sets the same global flag without."""
    code = ("import sys, torch\nfrom pytest_s2st.measure.determinism import seed_everything\nseed_everything(1)\n"
            "print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),"
            " 'torch._dynamo' in sys.modules, 'torch._inductor' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "False", "False"]


def test_set_threads_and_runtime_info_with_torch(monkeypatch):
    import torch

    old = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        assert set_threads(1) == 1 == torch.get_num_threads()
        info = runtime_info()
        assert info == {"threads": 1, "torch": torch.__version__, "omp_num_threads": "1"}
        assert set_threads(2) == 2
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_set_threads_rejects_bad_values(bad):
    with pytest.raises(S2STError, match="--s2st-threads="):
        set_threads(bad)


# --- device choice and records against stand-ins (added from a mutation-testing pass) ---------------------


def _fake_torch_logging_peak(monkeypatch, attr: str, n_devices: int = 2):
    """_fake_torch whose max_memory_allocated depends on (and logs) the index asked for."""
    log = _fake_torch(monkeypatch, attr, n_devices)
    api = getattr(sys.modules["torch"], attr)
    api.max_memory_allocated = lambda i=None: log.append(("peak", i)) or (i + 1) * MIB
    return log, api


def test_cpu_record_says_why_there_is_no_device_memory():
    assert Device().peak_mib().to_dict() == {"value": None, "method": "none", "reason": "no device memory on cpu"}


def test_cpu_is_cpu_even_when_cuda_is_there(monkeypatch):
    _fake_torch(monkeypatch, "cuda")
    assert type(resolve_device("cpu")) is Device and type(resolve_device(" CPU ")) is Device
    assert isinstance(resolve_device("auto"), CudaDevice)


@pytest.mark.parametrize("attr", ["cuda", "npu"])
def test_accelerator_peak_is_the_asked_device_in_mib(monkeypatch, attr):
    log, _ = _fake_torch_logging_peak(monkeypatch, attr)
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    d = resolve_device(f"{attr}:1")
    assert d.torch_device == f"{attr}:1"
    assert d.peak_mib().to_dict() == {"value": 2.0, "method": f"torch.{attr}.max_memory_allocated",
                                      "details": {"device": f"{attr}:1"}}
    assert ("peak", 1) in log


@pytest.mark.parametrize("attr", ["cuda", "npu"])
def test_index_beyond_the_visible_devices_is_refused(monkeypatch, attr):
    _fake_torch(monkeypatch, attr, n_devices=2)
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    assert one_line_error(f"{attr}:2") == f"--s2st-device={attr}:2: only 2 {attr} device(s) visible"


def test_describe_survives_a_failing_device_name(monkeypatch):
    _fake_torch(monkeypatch, "cuda")

    def no_name(i=None):
        raise RuntimeError("driver gone")

    sys.modules["torch"].cuda.get_device_name = no_name
    assert resolve_device("cuda:0").describe() == {
        "name": "cuda", "index": 0, "torch": "0.fake", "torch_device_name": None,
        "torch_device_name_error": "RuntimeError: driver gone"}


def test_npu_describe_reports_torch_npu_version(monkeypatch):
    _fake_torch(monkeypatch, "npu")
    torch_npu = types.ModuleType("torch_npu")
    torch_npu.__version__ = "2.13.0.fake"
    monkeypatch.setitem(sys.modules, "torch_npu", torch_npu)
    out = resolve_device("npu").describe()
    assert out == {"name": "npu", "index": 0, "torch": "0.fake", "torch_device_name": "Fake npu 0",
                   "torch_npu": "2.13.0.fake"}
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))  # no __version__
    assert resolve_device("npu").describe()["torch_npu"] is None


def test_npu_loaded_but_unavailable_is_one_line(monkeypatch):
    _fake_torch(monkeypatch, "npu")
    sys.modules["torch"].npu.is_available = lambda: False
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    assert one_line_error("npu") == "--s2st-device=npu: torch_npu is loaded but no NPU is available"


def test_auto_picks_npu_only_when_torch_npu_was_imported(monkeypatch):
    _fake_torch(monkeypatch, "npu")
    sys.modules["torch"].npu.current_device = lambda: 1
    assert type(resolve_device("auto")) is Device  # torch.npu works, but torch_npu was never imported
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    d = resolve_device("auto")
    assert isinstance(d, NpuDevice) and d.torch_device == "npu:1"


def test_auto_asks_for_torch_only_when_it_is_not_loaded(monkeypatch):
    # device.py sees no torch in sys.modules; find_spec decides whether `import torch` is tried at all.
    # The torch that `import torch` would get is a stand-in with a CUDA device.
    _fake_torch(monkeypatch, "cuda")
    asked = []
    spec = {"torch": None}
    fake_util = types.SimpleNamespace(find_spec=lambda name: asked.append(name) or spec.get(name))
    monkeypatch.setattr(device_mod, "importlib", types.SimpleNamespace(util=fake_util))
    monkeypatch.setattr(device_mod, "sys", types.SimpleNamespace(modules={}))
    assert type(resolve_device("auto")) is Device and asked == ["torch"]  # not installed: not imported
    spec["torch"] = object()
    assert isinstance(resolve_device("auto"), CudaDevice) and asked == ["torch", "torch"]


def test_cuda_unavailable_says_why(monkeypatch):
    _fake_torch(monkeypatch, "cuda")
    fake = sys.modules["torch"]
    fake.cuda.is_available = lambda: False
    assert one_line_error("cuda") == "--s2st-device=cuda: CUDA is not available (no CUDA device visible, torch 0.fake)"
    fake.version.cuda = None
    assert one_line_error("cuda") == "--s2st-device=cuda: CUDA is not available (torch is a CPU-only build, torch 0.fake)"


def test_cuda_without_importable_torch_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert one_line_error("cuda:0") == ("--s2st-device=cuda:0: torch cannot be imported "
                                        "(import of torch halted; None in sys.modules)")


def test_npu_load_failure_without_a_message_names_the_exception(monkeypatch):
    def broken():
        raise OSError()

    monkeypatch.setattr(device_mod, "_load_torch_npu", broken)
    assert one_line_error("npu").endswith("(Ascend CANN missing?): OSError")


def test_npu_before_torch_disables_backend_autoload(monkeypatch):
    # device.py sees no torch loaded: it must switch torch's backend autoload off before importing anything.
    monkeypatch.setattr(device_mod, "sys", types.SimpleNamespace(modules={}))
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    assert "torch_npu cannot be loaded" in one_line_error("npu")  # torch_npu is not installed here
    assert os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"


@pytest.mark.parametrize("asked", ["auto:0", "auto:1", "cpu:1"])
def test_auto_and_cpu_take_no_index(asked):
    assert "expected one of auto, cpu, cuda, npu" in one_line_error(asked)


# --- determinism --------------------------------------------------------------------------------------------


def test_seed_everything_default_seed_is_1(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")  # random and numpy only: leave torch's global flags alone
    seed_everything()
    a = (random.random(), float(np.random.rand()))
    seed_everything(1)
    assert (random.random(), float(np.random.rand())) == a


def test_seed_everything_without_numpy(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)
    monkeypatch.delitem(sys.modules, "torch")
    seed_everything(9)
    a = random.random()
    seed_everything(9)
    assert random.random() == a


def test_seed_everything_with_torch_sets_the_cublas_workspace(monkeypatch):
    import torch

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        seed_everything(2)
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # a user's own setting is kept
        seed_everything(2)
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    finally:
        torch.use_deterministic_algorithms(False)


def test_runtime_info_without_torch_in_process(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert runtime_info() == {"threads": None, "torch": None, "omp_num_threads": None}
    assert set_threads(3) is None

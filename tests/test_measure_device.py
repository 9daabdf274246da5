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
    assert log == [("reset", 1), ("sync", 1)]
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

"""The device a benchmark runs on: cpu, cuda or npu (Ascend via torch_npu).

torch is imported only when a non-cpu device is asked for (or "auto" looks for one), so that
non-torch pipelines on cpu never pay for it.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from pytest_s2st.errors import S2STError
from pytest_s2st.measure.record import Metric

MIB = 2**20
CHOICES = ("auto", "cpu", "cuda", "npu")


class Device:
    """cpu: nothing to synchronise, no device memory. Subclasses wrap torch.cuda / torch.npu."""

    name = "cpu"

    def __init__(self, index: int | None = None):
        self.index = index

    @property
    def torch_device(self) -> str:
        """String for tensor.to(...) / model.to(...)."""
        return self.name if self.index is None else f"{self.name}:{self.index}"

    def synchronize(self) -> None:
        pass

    def reset_peak(self) -> None:
        pass

    def peak_mib(self) -> Metric:
        return Metric.missing("none", "no device memory on cpu")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def __repr__(self) -> str:
        return f"Device({self.torch_device!r})"


class _TorchAccelerator(Device):
    """Shared by cuda and npu: both expose the same torch.cuda-style memory API under torch.<name>."""

    def _api(self):
        import torch

        return getattr(torch, self.name)

    def synchronize(self) -> None:
        self._api().synchronize(self.index)

    def reset_peak(self) -> None:
        self._api().reset_peak_memory_stats(self.index)

    def peak_mib(self) -> Metric:
        peak = self._api().max_memory_allocated(self.index)
        return Metric(peak / MIB, f"torch.{self.name}.max_memory_allocated", details={"device": self.torch_device})

    def describe(self) -> dict[str, Any]:
        import torch

        api = self._api()
        out: dict[str, Any] = {"name": self.name, "index": self.index, "torch": torch.__version__}
        try:
            out["torch_device_name"] = api.get_device_name(self.index)
        except Exception as exc:  # describing must never break a run
            out["torch_device_name"] = None
            out["torch_device_name_error"] = f"{type(exc).__name__}: {exc}"
        return out


class CudaDevice(_TorchAccelerator):
    name = "cuda"


class NpuDevice(_TorchAccelerator):
    name = "npu"

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        torch_npu = sys.modules.get("torch_npu")
        out["torch_npu"] = getattr(torch_npu, "__version__", None)
        return out


def _parse(asked: str) -> tuple[str, int | None]:
    kind, _, idx = str(asked).strip().lower().partition(":")
    if kind not in CHOICES or (idx and (kind in ("auto", "cpu") or not idx.isdecimal())):  # "²" is a digit int() refuses
        raise S2STError(f"--s2st-device={asked}: expected one of {', '.join(CHOICES)} (cuda/npu may take :N)")
    return kind, int(idx) if idx else None


def _check_index(api, kind: str, index: int | None, asked: str) -> int:
    count = api.device_count()
    if index is None:
        return api.current_device()
    if index >= count:
        raise S2STError(f"--s2st-device={asked}: only {count} {kind} device(s) visible")
    return index


def _cuda(asked: str, index: int | None) -> CudaDevice:
    try:
        import torch
    except Exception as exc:
        raise S2STError(f"--s2st-device={asked}: torch cannot be imported ({_first_line(exc)})") from None
    if not torch.cuda.is_available():
        why = "torch is a CPU-only build" if torch.version.cuda is None else "no CUDA device visible"
        raise S2STError(f"--s2st-device={asked}: CUDA is not available ({why}, torch {torch.__version__})")
    return CudaDevice(_check_index(torch.cuda, "cuda", index, asked))


def _load_torch_npu():
    # torch >= 2.5 auto-imports installed device backends on `import torch`; a broken torch_npu would then
    # break torch itself. Keep that off and import torch_npu explicitly, so its failure is ours to report.
    if "torch" not in sys.modules:
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import torch
    import torch_npu  # noqa: F401

    return torch


def _npu(asked: str, index: int | None) -> NpuDevice:
    try:
        torch = _load_torch_npu()
    except BaseException as exc:  # ImportError, OSError from missing CANN .so files, SystemExit from CANN checks
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise S2STError(
            f"--s2st-device={asked}: torch_npu cannot be loaded (Ascend CANN missing?): {_first_line(exc)}"
        ) from None
    if not torch.npu.is_available():
        raise S2STError(f"--s2st-device={asked}: torch_npu is loaded but no NPU is available")
    return NpuDevice(_check_index(torch.npu, "npu", index, asked))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def resolve_device(asked: str) -> Device:
    """auto | cpu | cuda[:N] | npu[:N] -> Device. 'cpu' never imports torch."""
    kind, index = _parse(asked)
    if kind == "cpu":
        return Device()
    if kind == "cuda":
        return _cuda(asked, index)
    if kind == "npu":
        return _npu(asked, index)
    return _auto()


def _auto() -> Device:
    """cuda when torch sees one, npu only when torch_npu was already imported by the user, else cpu."""
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return Device()
    try:
        import torch
    except Exception:
        return Device()
    if torch.cuda.is_available():
        return CudaDevice(torch.cuda.current_device())
    if "torch_npu" in sys.modules and hasattr(torch, "npu") and torch.npu.is_available():
        return NpuDevice(torch.npu.current_device())
    return Device()

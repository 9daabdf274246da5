"""The device a benchmark runs on: one table, BACKENDS, of cpu, cuda and npu (Ascend via torch_npu).

A row says what the rest of the package asks of a backend: its name, whether it takes an index (``cuda:1``),
whether fairseq's own code can place a model on it, and its Device class, which knows how to load its torch
backend, resolve an asked device (one-line errors), synchronise and read the peak memory. Settings, the
s2st-serve ``--device`` parser, xdist's device spreading and the fairseq pipeline all read this table:
a new backend is one row (and its Device class).

torch is imported only when a non-cpu device is asked for (or "auto" looks for one), so that
non-torch pipelines on cpu never pay for it.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any

from pytest_s2st.errors import S2STError
from pytest_s2st.measure.record import Metric

MIB = 2**20
AUTO = "auto"


class Device:
    """cpu: nothing to synchronise, no device memory. Subclasses wrap torch.cuda / torch.npu."""

    name = "cpu"

    def __init__(self, index: int | None = None):
        self.index = index

    @classmethod
    def resolve(cls, asked: str, index: int | None) -> Device:
        """The asked device, or S2STError saying in one line why it cannot be had."""
        return cls()

    @classmethod
    def found_by_auto(cls) -> Device | None:
        """What "auto" takes of this backend when torch is importable: None when it is not there."""
        return None

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

    @staticmethod
    def load_torch():
        """torch with this backend loaded (raises what the import raises)."""
        import torch  # lazy: heavy

        return torch

    def _api(self):
        import torch  # lazy: heavy

        return getattr(torch, self.name)

    def synchronize(self) -> None:
        self._api().synchronize(self.index)

    def reset_peak(self) -> None:
        self._api().reset_peak_memory_stats(self.index)

    def peak_mib(self) -> Metric:
        peak = self._api().max_memory_allocated(self.index)
        return Metric(peak / MIB, f"torch.{self.name}.max_memory_allocated", details={"device": self.torch_device})

    def describe(self) -> dict[str, Any]:
        import torch  # lazy: heavy

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

    @classmethod
    def resolve(cls, asked: str, index: int | None) -> CudaDevice:
        try:
            import torch  # lazy: optional
        except Exception as exc:
            raise S2STError(f"--s2st-device={asked}: torch cannot be imported ({_first_line(exc)})") from None
        if not torch.cuda.is_available():
            why = "torch is a CPU-only build" if torch.version.cuda is None else "no CUDA device visible"
            raise S2STError(f"--s2st-device={asked}: CUDA is not available ({why}, torch {torch.__version__})")
        return cls(_check_index(torch.cuda, "cuda", index, asked))

    @classmethod
    def found_by_auto(cls) -> CudaDevice | None:
        import torch  # lazy: heavy

        return cls(torch.cuda.current_device()) if torch.cuda.is_available() else None


class NpuDevice(_TorchAccelerator):
    name = "npu"

    @staticmethod
    def load_torch():
        return _load_torch_npu()

    @classmethod
    def resolve(cls, asked: str, index: int | None) -> NpuDevice:
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
        return cls(_check_index(torch.npu, "npu", index, asked))

    @classmethod
    def found_by_auto(cls) -> NpuDevice | None:
        """Only when the user already imported torch_npu: auto never loads CANN on its own."""
        import torch  # lazy: heavy

        if "torch_npu" in sys.modules and hasattr(torch, "npu") and torch.npu.is_available():
            return cls(torch.npu.current_device())
        return None

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        torch_npu = sys.modules.get("torch_npu")
        out["torch_npu"] = getattr(torch_npu, "__version__", None)
        return out


@dataclass(frozen=True)
class Backend:
    """One row of BACKENDS. ``indexed``: takes ``:N`` (one device of several; xdist spreads workers over them).
    ``fairseq``: fairseq's own code places models on it (its ``--cpu`` off); else fairseq runs on cpu.
    ``device``: the Device class (resolve, load_torch, synchronize, peak_mib, describe)."""

    name: str
    indexed: bool
    fairseq: bool
    device: type[Device]


# ONE table; "auto" takes the first row whose found_by_auto answers (cpu's never does: it is the fallback)
BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("cpu", indexed=False, fairseq=False, device=Device),
    Backend("cuda", indexed=True, fairseq=True, device=CudaDevice),
    Backend("npu", indexed=True, fairseq=False, device=NpuDevice),
)}
CHOICES = (AUTO, *BACKENDS)
_INDEXED = "/".join(name for name, b in BACKENDS.items() if b.indexed)
CHOICES_TEXT = f"{', '.join(CHOICES)} ({_INDEXED} may take :N)"  # the one line every refusal names


def parse_device(asked: Any) -> tuple[str, int | None]:
    """'cuda:1' -> ('cuda', 1), ' CPU ' -> ('cpu', None); ValueError(expected one of ...) for anything else."""
    kind, sep, idx = str(asked).strip().lower().partition(":")
    backend = BACKENDS.get(kind)
    if (backend is None and kind != AUTO) or (sep and (backend is None or not backend.indexed
                                                      or not idx.isdecimal())):  # "²" is a digit int() refuses
        raise ValueError(f"expected one of {CHOICES_TEXT}")
    return kind, int(idx) if sep else None


def backend_of(device: str) -> Backend:
    """The row of a resolved device name ('cuda', 'cuda:1', 'cpu')."""
    return BACKENDS[device.partition(":")[0]]


def _check_index(api, kind: str, index: int | None, asked: str) -> int:
    count = api.device_count()
    if index is None:
        return api.current_device()
    if index >= count:
        raise S2STError(f"--s2st-device={asked}: only {count} {kind} device(s) visible")
    # the pipelines place models by backend name (fairseq's .cuda(), .to("cuda")): the asked index becomes the
    # process's current device, so the model runs where the clock synchronises and the peak is read
    api.set_device(index)
    return index


def _load_torch_npu():
    # torch >= 2.5 auto-imports installed device backends on `import torch`; a broken torch_npu would then
    # break torch itself. Keep that off and import torch_npu explicitly, so its failure is ours to report.
    if "torch" not in sys.modules:
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import torch  # lazy: heavy
    # lazy: heavy
    import torch_npu  # noqa: F401

    return torch


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def resolve_device(asked: str) -> Device:
    """auto | cpu | cuda[:N] | npu[:N] -> Device. 'cpu' never imports torch."""
    try:
        kind, index = parse_device(asked)
    except ValueError as exc:
        raise S2STError(f"--s2st-device={asked}: {exc}") from None
    if kind == AUTO:
        return _auto()
    return BACKENDS[kind].device.resolve(asked, index)


def _auto() -> Device:
    """The first backend torch sees (cuda; npu only when torch_npu was already imported by the user), else cpu."""
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return Device()
    try:
        # lazy: optional
        import torch  # noqa: F401
    except Exception:
        return Device()
    for backend in BACKENDS.values():
        found = backend.device.found_by_auto()
        if found is not None:
            return found
    return Device()

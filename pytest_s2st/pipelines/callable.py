"""model_type: callable — benchmark any Python model, no fairseq needed.

Each stage names ``entry: package.module:factory`` (or ``path/to/file.py:factory``, resolved
against the config's folder). The factory is called with the stage's other keys it accepts
(none by default) and returns a callable taking one input; stage N+1 receives stage N's output.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Callable

from ..errors import S2STError


def _load_entry(entry: Any, where: str) -> Callable[..., Any]:
    if not isinstance(entry, str) or ":" not in entry:
        raise S2STError(f"{where}: entry must be 'package.module:factory' or 'file.py:factory', got {entry!r}")
    target, _, attr = entry.rpartition(":")
    try:
        if target.endswith(".py"):
            path = Path(target)
            if not path.is_file():
                raise S2STError(f"{where}: entry file {path} does not exist")
            name = "s2st_entry_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
            module = sys.modules.get(name)
            if module is None:
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except S2STError:
        raise
    except Exception as exc:  # the user's module failed to import: say which and why, in one line
        raise S2STError(f"{where}: entry {entry!r} cannot be imported: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise S2STError(f"{where}: entry {entry!r}: module has no attribute {attr!r}")
    if not callable(factory):
        raise S2STError(f"{where}: entry {entry!r} is not callable")
    return factory


class CallableStage:
    def __init__(self, name: str, fn: Callable[[Any], Any], source: str | None):
        self.name = name
        self._fn = fn
        self.source = source

    def forward(self, x: Any) -> Any:
        return self._fn(x)

    def to_next_input(self, output: Any) -> Any:
        return output


class CallablePipeline:
    model_type = "callable"

    def __init__(self, stages: list[CallableStage]):
        self.stages = stages

    def prepare_sample(self, sample: Any) -> Any:
        return sample

    def assets(self) -> dict[str, str]:
        out = {}
        for stage in self.stages:
            if stage.source and Path(stage.source).is_file():
                out[stage.source] = hashlib.sha256(Path(stage.source).read_bytes()).hexdigest()
        return out

    def close(self) -> None:
        self.stages = []


def _build_stage(index: int, stage: dict[str, Any], config_path: Path, device: str) -> CallableStage:
    where = f"{config_path} (stage{index}.entry)"
    factory = _load_entry(stage.get("entry"), where)
    # pass only the keys the factory declares, so general keys (dataset_path, ...) do not leak in
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs = {k: v for k, v in stage.items() if k in params and k != "entry"}
    if "device" in params:
        kwargs["device"] = device  # the resolved device (cpu/cuda/npu), for factories that place their model
    try:
        fn = factory(**kwargs)
    except Exception as exc:
        raise S2STError(f"{where}: factory {stage.get('entry')!r} raised {type(exc).__name__}: {exc}") from None
    if not callable(fn):
        raise S2STError(f"{where}: factory {stage.get('entry')!r} returned {type(fn).__name__}, not a callable")
    source = inspect.getsourcefile(factory) if inspect.isfunction(factory) else None
    return CallableStage(stage.get("stage_name") or f"stage{index}", fn, source)


def is_pipeline(obj: Any) -> bool:
    """Whether obj already speaks the Pipeline protocol (s2st_pipeline's kind), rather than being a model."""
    return all(hasattr(obj, a) for a in ("model_type", "stages", "prepare_sample", "assets", "close"))


def from_function(fn: Any, where: str) -> CallablePipeline:
    """A plain callable (one input in, one output out) as a one-stage pipeline: ``s2st_benchmark(fn, inputs)``."""
    if not callable(fn):
        raise S2STError(f"{where}: the model must be a callable taking one input (or s2st_pipeline), "
                        f"got {type(fn).__name__}")
    try:
        source = inspect.getsourcefile(fn) if inspect.isfunction(fn) else None
    except TypeError:
        source = None
    return CallablePipeline([CallableStage("stage1", fn, source)])


def build(stages: list[dict[str, Any]], *, model_type: str = "callable", device: str, config_path: Path) -> CallablePipeline:
    if not stages:
        raise S2STError(f"{config_path}: model_type 'callable' needs stage1 with an entry")
    return CallablePipeline([_build_stage(i + 1, s, config_path, device) for i, s in enumerate(stages)])

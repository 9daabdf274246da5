"""model_type: callable — benchmark any Python model, no fairseq needed.

Each stage names ``entry: package.module:factory`` (or ``path/to/file.py:factory``, resolved
against the config's folder). The factory is called with the stage's other keys it accepts
(none by default) and returns a callable taking one input; stage N+1 receives stage N's output.
A key written in the stage's own section that the factory does not take (and that is not one of
FRAMEWORK_KEYS) is refused with the closest parameter name, unless the factory takes **kwargs.
What the user's code raises (importing, building, or a forward) is one line naming the frame in
their own code (file:line), never a traceback.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import S2STError
from ..inputs import closest, show

# stage keys the framework reads itself (dump sample rate, stage label, the resolved device)
FRAMEWORK_KEYS = ("entry", "stage_name", "target_sr", "device")
_OURS = str(Path(__file__).resolve().parent.parent)
_LIBRARY_DIRS = tuple(sorted({str(Path(p).resolve()) for k in ("stdlib", "platstdlib", "purelib", "platlib")
                              if (p := sysconfig.get_paths().get(k))}))


def user_frame(exc: BaseException, prefer: str | None = None) -> str | None:
    """'file:line' of the innermost frame of ``exc`` in the user's own code: not this package, not
    the standard library or site-packages, else the innermost frame in ``prefer`` (the factory's
    file, which may itself be installed), else the innermost frame outside this package."""
    frames = [(str(Path(f.filename).resolve()) if f.filename and not f.filename.startswith("<") else f.filename, f)
              for f in traceback.extract_tb(exc.__traceback__)]
    if isinstance(exc, SyntaxError) and exc.filename:  # the error is in the file, not in a frame
        return f"{exc.filename}:{exc.lineno}"
    theirs = [(path, f) for path, f in frames if not path.startswith(_OURS + "/")]
    picks = ([f for path, f in theirs if not path.startswith(_LIBRARY_DIRS) and not path.startswith("<")],
             [f for path, f in theirs if prefer and path == str(Path(prefer).resolve())],
             [f for _, f in theirs])
    frame = next((p[-1] for p in picks if p), None)
    return f"{frame.filename}:{frame.lineno}" if frame is not None else None


def raised(exc: BaseException, prefer: str | None = None) -> str:
    """'ValueError: text (at file.py:12)' on one line."""
    at = user_frame(exc, prefer)
    return f"{type(exc).__name__}: {show(exc)}" + (f" (at {show(at)})" if at else "")


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
        raise S2STError(f"{where}: entry {entry!r} cannot be imported: "
                        f"{raised(exc, target if target.endswith('.py') else None)}") from None
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
        try:  # free unless it raises (3.11+): the user's failure is one line naming their file:line
            return self._fn(x)
        except S2STError:
            raise
        except Exception as exc:
            raise S2STError(f"stage {self.name!r}: the model raised {raised(exc, self.source)}") from None

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


def _build_stage(index: int, stage: dict[str, Any], config_path: Path, device: str,
                 lines: Mapping[str, int] | None = None) -> CallableStage:
    section = f"stage{index}"
    where = f"{config_path} ({section}.entry)"
    entry = stage.get("entry")
    factory = _load_entry(entry, where)
    # pass only the keys the factory declares, so general keys (dataset_path, ...) do not leak in
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = None
    if params is not None and lines is not None and \
            not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        takes = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        for key in stage:  # keys written in this stage's own section (config lines), not general's
            line = lines.get(f"{section}.{key}")
            if line is not None and key not in params and key not in FRAMEWORK_KEYS:
                raise S2STError(f"{config_path}:{line} ({section}.{show(key)}): factory {show(entry)!r} takes no "
                                f"argument {show(key)!r}{closest(key, takes)}; it takes: "
                                f"{', '.join(takes) or 'none'}")
    params = params or {}
    kwargs = {k: v for k, v in stage.items() if k in params and k != "entry"}
    if "device" in params:
        kwargs["device"] = device  # the resolved device (cpu/cuda/npu), for factories that place their model
    try:
        source = inspect.getsourcefile(factory) if inspect.isfunction(factory) else None
    except TypeError:
        source = None
    try:
        fn = factory(**kwargs)
    except Exception as exc:
        raise S2STError(f"{where}: factory {show(entry)!r} raised {raised(exc, source)}") from None
    if not callable(fn):
        at = _defined_at(factory)
        raise S2STError(f"{where}: factory {show(entry)!r}{f' ({at})' if at else ''} returned "
                        f"{type(fn).__name__}, not a callable")
    return CallableStage(stage.get("stage_name") or section, fn, source)


def _defined_at(factory: Any) -> str | None:
    """'defined at file:line' of a Python function, or None."""
    code = getattr(factory, "__code__", None)
    return f"defined at {show(code.co_filename)}:{code.co_firstlineno}" if code is not None else None


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


def build(stages: list[dict[str, Any]], *, model_type: str = "callable", device: str, config_path: Path,
          config_lines: Mapping[str, int] | None = None) -> CallablePipeline:
    """``config_lines`` (CaseConfig.lines) tells which keys each stage's own section wrote: those
    the factory does not take are refused; without it they are left out silently."""
    if not stages:
        raise S2STError(f"{config_path}: model_type 'callable' needs stage1 with an entry")
    return CallablePipeline([_build_stage(i + 1, s, config_path, device, config_lines) for i, s in enumerate(stages)])

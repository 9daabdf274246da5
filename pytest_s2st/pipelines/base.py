"""The Pipeline protocol and the model_type registry.

A pipeline is a list of stages. Each stage has one measured call, ``forward(x)``, and an
unmeasured bridge, ``to_next_input(output)``, that turns its output into the next stage's
input (cascades: intermediate inputs are generated beforehand, IO excluded from the numbers).
Conventions shared by all pipelines:
- ``prepare_sample`` accepts a dataset sample in the fairseq benchmark format
  (``{"id", "net_input": {"src_tokens", "src_lengths"}}``) or, for text-input pipelines, a text
  sample ``{"id", "text", "language"?, "voice"?, "seed"?}`` (the service workload format; the type's
  ModelType.text_fields are the ones its datasets must have).
- A stage whose output is speech returns ``{"waveform": 1-D float32 numpy array, "sample_rate": int}``;
  a stage whose output is text returns ``{"text": str}``; anything else is stage-specific.
- ``device`` is a backend name of measure.device.BACKENDS ("cpu", "cuda", "npu"; already resolved).

Registry entries are "module:attribute" strings so that no heavy module is imported until a
pipeline of that type is built.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from ..errors import S2STError
from ..workload import REQUIRED_FIELDS as WORKLOAD_FIELDS


@runtime_checkable
class Stage(Protocol):
    name: str

    def forward(self, x: Any) -> Any:
        """One sample through this stage: the call that is timed, memory-profiled and FLOP-counted."""

    def to_next_input(self, output: Any) -> Any:
        """Turn this stage's output into the next stage's input (not measured)."""


@runtime_checkable
class Pipeline(Protocol):
    model_type: str
    stages: Sequence[Stage]

    def prepare_sample(self, sample: Any) -> Any:
        """Dataset sample -> first stage's input (not measured)."""

    def assets(self) -> dict[str, str]:
        """Files the pipeline loaded, as {path: sha256}."""

    def close(self) -> None:
        """Release the models."""


@dataclass(frozen=True)
class ModelType:
    """What the rest of the package needs to know about a model type, without importing its module.

    target: "module:factory"; factory(stages: list[dict], *, model_type, device, config_path) -> Pipeline
    (one factory may serve several types: it is told which).
    serves_speech: takes a text request and answers speech (what a speech service serves); None: the
    case says so with general.serves_speech (default yes) -- callables and extensions.
    streaming: has a chunked decoder (``pipeline.stream``) that s2st-serve --stream drives;
    no_stream_reason: the one line that says why not, when the generic one says too little.
    text_fields: the fields of a text sample (dataset_type text) it needs; the others of the workload
    format may be there and are checked when they are.
    path_keys: stage keys (besides the loader's generic ones) whose values are files; config.load_config
    resolves them against the YAML's folder, once, so pipelines receive absolute paths.
    ensemble_keys: keys holding several files joined by ':' (fairseq's checkpoint ensemble, ``path``).
    entry_keys: keys naming "file.py:attr" (the file resolved) or "package.module:attr" (left alone).
    stages: (fewest, most) stage sections a config of this type may have (most None: no limit).
    """

    target: str
    serves_speech: bool | None = None
    path_keys: tuple[str, ...] = ()
    stages: tuple[int, int | None] = (1, None)
    streaming: bool = False
    no_stream_reason: str | None = None
    text_fields: tuple[str, ...] = WORKLOAD_FIELDS
    ensemble_keys: tuple[str, ...] = ()
    entry_keys: tuple[str, ...] = ()


_FAIRSEQ = ModelType("pytest_s2st.pipelines.fairseq:build", False,
                    ("data", "vocoder", "vocoder_cfg", "hubert_ckpt_path", "hubert_km_path"), (1, 1),
                    text_fields=("id", "text"), ensemble_keys=("path",))
_FAIRSEQ_TTS_NO_STREAM = ("fairseq's TTS vocoders run once on the whole spectrogram the decoder returns; no chunked "
                          "decoder is wired")

# ONE table: the registry and what each type can do (serves speech, streams, the text fields it needs,
# its path keys and stage counts); a new model family is one row here and its pipeline module
MODEL_TYPES: dict[str, ModelType] = {
    "callable": ModelType("pytest_s2st.pipelines.callable:build", entry_keys=("entry",)),
    "S2T": _FAIRSEQ,
    "MT": _FAIRSEQ,
    "TTS": replace(_FAIRSEQ, serves_speech=True, no_stream_reason=_FAIRSEQ_TTS_NO_STREAM),
    "S2S": _FAIRSEQ,
    "S2UT": replace(_FAIRSEQ, stages=(1, 2)),  # units, then an optional unit vocoder
    "2StageS2ST": replace(_FAIRSEQ, stages=(2, 2)),
    "3StageS2ST": replace(_FAIRSEQ, stages=(3, 3)),
    "HubertUnits": replace(_FAIRSEQ, stages=(1, 2)),
    "Qwen3TTS": ModelType("pytest_s2st.pipelines.qwen3tts:build", True, ("path", "manifest"), (1, 1), streaming=True),
}

KNOWN_MODEL_TYPES = tuple(MODEL_TYPES)
_UNKNOWN = ModelType("")  # what an unknown type declares: nothing


def model_type_info(model_type: str) -> ModelType:
    """The registry's row of a model type; an unknown type gets the defaults (no extra keys)."""
    return MODEL_TYPES.get(model_type, _UNKNOWN)


def serves_speech(model_type: str, declared: bool | None = None) -> bool:
    """The model type's answer, else the case's own ``general.serves_speech``, else yes."""
    own = model_type_info(model_type).serves_speech
    if own is not None:
        return own
    return True if declared is None else declared


def declares_serves_speech(model_type: str) -> bool:
    """Does the type itself say whether it serves speech (else the case does)?"""
    return model_type_info(model_type).serves_speech is not None


def text_fields(model_type: str) -> tuple[str, ...]:
    """The fields a text dataset's samples must have for this type (unknown type: all of the workload's)."""
    return model_type_info(model_type).text_fields


def stream_refusal(model_type: str) -> str | None:
    """None when the type streams, else the one line that says why not (known before any model loads)."""
    row = model_type_info(model_type)
    if row.streaming:
        return None
    return row.no_stream_reason or f"model_type {model_type} has no chunked decoder"


def speech_types() -> list[str]:
    """The types that may serve speech from text: those that say so, then those whose case says (callable)."""
    return ([t for t, row in MODEL_TYPES.items() if row.serves_speech] +
            [t for t, row in MODEL_TYPES.items() if row.serves_speech is None])


def streaming_types() -> list[str]:
    return [t for t, row in MODEL_TYPES.items() if row.streaming]


def one_of(names: Sequence[str]) -> str:
    """'a', 'a or b', 'a, b or c': a hint's list of model types."""
    return " or ".join(filter(None, (", ".join(names[:-1]), names[-1] if names else "")))


def check_stage_count(model_type: str, count: int, where: str) -> None:
    """A config with too few or too many stage sections for its type: one line, before any model loads."""
    fewest, most = MODEL_TYPES[model_type].stages
    if count < fewest or (most is not None and count > most):
        wanted = str(fewest) if fewest == most else f"{fewest} to {most}" if most else f"at least {fewest}"
        sections = ", ".join(f"stage{i}" for i in range(1, (most or fewest) + 1))
        raise S2STError(f"{where}: model_type {model_type} takes {wanted} stage section(s) ({sections}), "
                        f"the config has {count}")


def register(model_type: str, target: str, *, path_keys: Sequence[str] | str | None = None,
             text_fields: Sequence[str] | None = None, **capabilities: Any) -> None:
    """Add a pipeline type ("module:factory"); used by extensions. ``capabilities``: the other fields of
    ModelType (serves_speech, stages, streaming, no_stream_reason, ensemble_keys, entry_keys)."""
    if isinstance(path_keys, str):  # a lone "key" would otherwise become its letters
        path_keys = (path_keys,)
    if text_fields is not None:
        capabilities["text_fields"] = tuple(text_fields)
    MODEL_TYPES[model_type] = ModelType(target, path_keys=tuple(path_keys or ()), **capabilities)


def known_model_types() -> list[str]:
    return sorted(MODEL_TYPES)


def check_model_type(model_type: Any, where: str) -> str:
    if model_type not in MODEL_TYPES:
        raise S2STError(
            f"{where}: unknown model_type {model_type!r}; known: {', '.join(known_model_types())}"
        )
    return model_type


def build_pipeline(model_type: str, stages: list[Mapping[str, Any]], *, device: str, config_path: Path,
                   config_lines: Mapping[str, int] | None = None) -> Pipeline:
    """``config_lines``: the config's key -> line map (CaseConfig.lines), for builders that check
    each stage section's own keys (callable: a misspelt factory argument is refused)."""
    check_model_type(model_type, str(config_path))
    module_name, _, attr = MODEL_TYPES[model_type].target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise S2STError(
            f"{config_path}: model_type {model_type!r} needs {module_name}, which cannot be imported: {exc}"
        ) from None
    factory = getattr(module, attr)
    extra = {"config_lines": config_lines} if config_lines is not None and \
        "config_lines" in inspect.signature(factory).parameters else {}
    return factory([dict(s) for s in stages], model_type=model_type, device=device, config_path=config_path, **extra)

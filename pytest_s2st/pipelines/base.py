"""The Pipeline protocol and the model_type registry.

A pipeline is a list of stages. Each stage has one measured call, ``forward(x)``, and an
unmeasured bridge, ``to_next_input(output)``, that turns its output into the next stage's
input (cascades: intermediate inputs are generated beforehand, IO excluded from the numbers).
Conventions shared by all pipelines:
- ``prepare_sample`` accepts a dataset sample in the fairseq benchmark format
  (``{"id", "net_input": {"src_tokens", "src_lengths"}}``) or, for text-input pipelines, a text
  sample ``{"id", "text", "language"?, "voice"?, "seed"?}`` (the service workload format).
- A stage whose output is speech returns ``{"waveform": 1-D float32 numpy array, "sample_rate": int}``;
  a stage whose output is text returns ``{"text": str}``; anything else is stage-specific.
- ``device`` is "cpu", "cuda" or "npu" (already resolved).

Registry entries are "module:attribute" strings so that no heavy module is imported until a
pipeline of that type is built.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from ..errors import S2STError


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


# model_type -> "module:factory". factory(stages: list[dict], *, model_type: str, device: str, config_path: Path) -> Pipeline
# (one factory may serve several model types: it is told which)
REGISTRY: dict[str, str] = {
    "callable": "pytest_s2st.pipelines.callable:build",
    "S2T": "pytest_s2st.pipelines.fairseq:build",
    "MT": "pytest_s2st.pipelines.fairseq:build",
    "TTS": "pytest_s2st.pipelines.fairseq:build",
    "S2S": "pytest_s2st.pipelines.fairseq:build",
    "S2UT": "pytest_s2st.pipelines.fairseq:build",
    "2StageS2ST": "pytest_s2st.pipelines.fairseq:build",
    "3StageS2ST": "pytest_s2st.pipelines.fairseq:build",
    "HubertUnits": "pytest_s2st.pipelines.fairseq:build",
    "Qwen3TTS": "pytest_s2st.pipelines.qwen3tts:build",
}

KNOWN_MODEL_TYPES = tuple(REGISTRY)

# Does a pipeline of this type take a text request and answer speech (what a speech service serves)?
# Types not listed (callable, extensions) may: their case says so with general.serves_speech (default yes).
SERVES_SPEECH: dict[str, bool] = {
    "TTS": True, "Qwen3TTS": True,
    "S2T": False, "MT": False, "S2S": False, "S2UT": False, "2StageS2ST": False, "3StageS2ST": False,
    "HubertUnits": False,
}


# Stage keys (besides the loader's generic ones) whose values are files: config.load_config resolves
# them against the YAML's folder, once, so pipelines receive absolute paths and resolve nothing.
FAIRSEQ_PATH_KEYS = ("data", "path", "vocoder", "vocoder_cfg", "hubert_ckpt_path", "hubert_km_path")
PATH_KEYS: dict[str, tuple[str, ...]] = {
    **{t: FAIRSEQ_PATH_KEYS for t in ("S2T", "MT", "TTS", "S2S", "S2UT", "2StageS2ST", "3StageS2ST", "HubertUnits")},
    "Qwen3TTS": ("manifest",),
}


def path_keys(model_type: str) -> frozenset[str]:
    """The extra path keys a model type declared (PATH_KEYS); none for an unknown type."""
    return frozenset(PATH_KEYS.get(model_type, ()))


def serves_speech(model_type: str, declared: bool | None = None) -> bool:
    """The model type's answer (SERVES_SPEECH), else the case's own ``general.serves_speech``, else yes."""
    known = SERVES_SPEECH.get(model_type)
    if known is not None:
        return known
    return True if declared is None else declared


def register(model_type: str, target: str, *, serves_speech: bool | None = None,
             path_keys: Sequence[str] | None = None) -> None:
    """Add a pipeline type ("module:factory"); used by extensions. ``serves_speech``: see SERVES_SPEECH;
    ``path_keys``: stage keys holding file paths, resolved by the config loader (see PATH_KEYS)."""
    REGISTRY[model_type] = target
    if serves_speech is not None:
        SERVES_SPEECH[model_type] = serves_speech
    if path_keys is not None:
        if isinstance(path_keys, str):  # a lone "key" would otherwise become its letters
            path_keys = (path_keys,)
        PATH_KEYS[model_type] = tuple(path_keys)


def known_model_types() -> list[str]:
    return sorted(REGISTRY)


def check_model_type(model_type: Any, where: str) -> str:
    if model_type not in REGISTRY:
        raise S2STError(
            f"{where}: unknown model_type {model_type!r}; known: {', '.join(known_model_types())}"
        )
    return model_type


def build_pipeline(model_type: str, stages: list[Mapping[str, Any]], *, device: str, config_path: Path) -> Pipeline:
    check_model_type(model_type, str(config_path))
    module_name, _, attr = REGISTRY[model_type].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise S2STError(
            f"{config_path}: model_type {model_type!r} needs {module_name}, which cannot be imported: {exc}"
        ) from None
    factory = getattr(module, attr)
    return factory([dict(s) for s in stages], model_type=model_type, device=device, config_path=config_path)

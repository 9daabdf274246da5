"""The embedded default: what `pytest benchmarks/` runs when no --s2st-config is given.

The callable demo always; the tiny real fairseq models of every kind when fairseq is installed,
and a tiny random Qwen3-TTS when qwen-tts is (both built offline on first use, then cached).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from .demo import stage_demo
from .tiny.cache import cache_root
from .tiny.fairseq_tiny import default_configs
from .workload import DEFAULT_WORKLOAD

QWEN_YAML = """\
# Embedded default: the tiny random Qwen3-TTS (built offline, manifest-checked), as a service.
general:
  name: tiny
  model_type: Qwen3TTS
  dataset_path: {workload}
  dataset_type: text
  dataset_size: 2
stage1:
  path: {path}
  max_new_tokens: 25
  dtype: float32
"""


def _available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def stage_qwen_config() -> Path:
    from .tiny.qwen_tiny import tiny_qwen3tts_dir  # lazy: heavy

    model_dir = tiny_qwen3tts_dir()
    config = model_dir.parent / f"{model_dir.name}.yaml"
    text = QWEN_YAML.format(path=model_dir, workload=DEFAULT_WORKLOAD)
    if not config.exists() or config.read_text() != text:  # derived: rewritten when this template changes
        tmp = config.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, config)
    return config


def default_config_paths() -> list[Path]:
    paths = [stage_demo(cache_root() / "demo")]
    if _available("fairseq"):
        paths += default_configs()
    if _available("qwen_tts"):
        paths.append(stage_qwen_config())
    return paths

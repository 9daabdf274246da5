"""A fairseq stage's namespace, as upstream get_metrics.py builds it: fairseq's speech-generation parser defaults
(default task text_to_speech, so its defaults leak into every stage, as upstream) updated with the merged
general + stageN dict; a stage key no fairseq argument has is refused with its config line.

torch-free at import; fairseq is imported when the first namespace is built.
"""
from __future__ import annotations

import argparse
import copy
import difflib
import logging
from argparse import Namespace
from pathlib import Path
from typing import Mapping

from ..errors import S2STError
from ..measure.device import backend_of
from .fairseq_runtime import quiet_fairseq

# stage role -> task family it must run (stage task and checkpoint task are both checked)
ROLE_TASK = {"s2t": "speech_to_text", "mt": "translation", "tts": "text_to_speech",
             "s2s": "speech_to_speech", "s2u": "speech_to_speech", "hubert": "hubert_pretraining"}
_BASE_NS: Namespace | None = None



def _base_namespace() -> Namespace:
    """Upstream make_parser() parsed with ['', '--config', ...]: fairseq's own defaults."""
    global _BASE_NS
    if _BASE_NS is None:
        with quiet_fairseq():  # importing fairseq warns (torch.jit.script, hydra): keep -W error runs alive
            from fairseq import options  # lazy: heavy

            parser = options.get_speech_generation_parser()
            parser.add_argument("--target-is-code", action="store_true", default=False)
            parser.add_argument("--config", type=str)
            parser.add_argument("--model-type", default="S2U")
            parser.add_argument("--dataset-path", type=str)
            parser.add_argument("--dataset-type", type=str, default="npy")
            parser.add_argument("--read-using-sf", type=str, default=False)
            parser.add_argument("--dataset-size", default=None, type=int)
            parser.add_argument("--dump-speech-waveforms-dir", default=None, type=str)
            parser.add_argument("--dump-waveform-file-prefix", default="", type=str)
            parser.add_argument("--feat-dim", default=80, type=int)
            parser.add_argument("--target-sr", default=16000, type=int)
            options.add_generation_args(parser)
            _BASE_NS = options.parse_args_and_arch(parser, input_args=[""])
    return copy.deepcopy(_BASE_NS)


# stage keys this project reads that are no fairseq argument: the unit vocoder's and the HuBERT unit extractor's
OWN_STAGE_KEYS = frozenset({"vocoder", "vocoder_cfg", "dur_prediction", "hubert_ckpt_path", "hubert_km_path",
                            "hubert_layer", "max_chunk", "normalize_waveform"})
_KNOWN_KEYS: frozenset | None = None


def known_stage_keys() -> frozenset:
    """Every name a stage section may use: fairseq's speech-generation parser (common, dataset, generation
    arguments), the arguments of every task a stage runs (ROLE_TASK), and OWN_STAGE_KEYS."""
    global _KNOWN_KEYS
    if _KNOWN_KEYS is None:
        was = logging.root.manager.disable
        logging.disable(logging.INFO)  # fairseq's task modules log install hints (tensorboardX) on import
        try:
            keys = set(vars(_base_namespace())) | OWN_STAGE_KEYS
            with quiet_fairseq():
                from fairseq.tasks import TASK_REGISTRY  # lazy: heavy

                for task in sorted(set(ROLE_TASK.values())):
                    parser = argparse.ArgumentParser(conflict_handler="resolve", add_help=False)
                    TASK_REGISTRY[task].add_args(parser)
                    keys |= {action.dest for action in parser._actions}
        finally:
            logging.disable(was)
        _KNOWN_KEYS = frozenset(keys)
    return _KNOWN_KEYS


def check_stage_keys(index: int, role: str, config_path: Path, lines: Mapping[str, int]) -> None:
    """A key written in the stage's own section (``stageN.key`` in the config's line map) that no fairseq
    argument and no key of this project has: refused with the closest name (upstream would ignore it, so
    ``beem: 20`` would silently run at the default beam)."""
    prefix = f"stage{index}."
    known = known_stage_keys()
    for dotted, line in lines.items():
        if not dotted.startswith(prefix) or "." in dotted[len(prefix):]:
            continue
        key = dotted[len(prefix):]
        if key.replace("-", "_") in known:
            continue
        close = difflib.get_close_matches(key.replace("-", "_"), sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else " (see fairseq's generate options)"
        raise S2STError(f"{config_path}:{line} ({dotted}): unknown key {key!r} for a fairseq {role} stage: no fairseq "
                        f"argument has that name{hint}")


def stage_namespace(stage: dict, *, device: str, config_path: Path) -> Namespace:
    """fairseq's defaults updated with the stage. Its paths arrive resolved (config.load_config,
    keys declared in pipelines.base.MODEL_TYPES): nothing is resolved here."""
    ns = _base_namespace()
    d = vars(ns)
    d.update(stage)
    d["config"] = str(config_path)
    d["cpu"] = not backend_of(device).fairseq  # a backend fairseq cannot place models on runs it on cpu
    return ns

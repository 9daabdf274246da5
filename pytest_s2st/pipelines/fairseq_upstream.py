"""Upstream's own benchmark (fairseq examples/speech_to_speech/benchmarking), runnable on torch 2.x.

For comparisons only (same models, same samples): ``install_shims()`` patches what upstream needs
and nothing else, ``upstream_model(config)`` builds upstream's model object exactly as
get_metrics.cli_main does, and ``python -m pytest_s2st.pipelines.fairseq_upstream '' --config X``
runs get_metrics.py unchanged. Run it from the config's folder: upstream resolves relative paths
against the current directory. Shims:
- ``torch.set_deterministic`` (gone) -> ``torch.use_deterministic_algorithms``;
- torch.load's weights_only default -> argparse.Namespace allow-listed (as our pipelines do);
- ``examples`` importable as a top-level package (the wheel ships it as ``fairseq.examples``) and
  ``feature_utils`` importable for the HuBERT reader upstream imports (a placeholder
  ``npy_append_array`` where that package is missing: only feature dumping uses it);
- python-papi >= 6 dropped ``papi_high.start_counters``; where it is missing, the same two calls are
  served by our FLOPs pass's dispatch-level counter (torch.utils.flop_counter's formulas plus the attention
  kernels' of measure/attention_flops.py: plain FlopCounterMode counts the CPU SDPA and fused attention
  paths as 0), so upstream "flops" equal ours by construction of the counter (and are not hardware counts);
- librosa >= 0.10 keyword-only ``filters.mel`` (Griffin-Lim), as in our pipelines: librosa (and numba)
  imported only when Griffin-Lim builds its filters, as upstream's own get_mel_filters does.
"""
from __future__ import annotations

import copy
import os
import sys
import types
from argparse import Namespace
from pathlib import Path
from typing import Any

import torch

from ..measure.tensor_memory import new_probe, probe_flops
from .fairseq_files import allow_fairseq_globals, librosa_compat


def install_shims() -> None:
    import fairseq  # lazy: heavy
    import fairseq.examples  # lazy: heavy

    if not hasattr(torch, "set_deterministic"):
        torch.set_deterministic = torch.use_deterministic_algorithms
    allow_fairseq_globals()
    librosa_compat()
    sys.modules.setdefault("examples", fairseq.examples)
    kmeans_dir = str(Path(fairseq.__file__).parent / "examples" / "hubert" / "simple_kmeans")
    if kmeans_dir not in sys.path:
        sys.path.append(kmeans_dir)
    try:  # feature_utils (imported by upstream's HuBERT reader) needs it only to dump features
        # lazy: optional
        import npy_append_array  # noqa: F401
    except ImportError:
        stub = types.ModuleType("npy_append_array")

        class NpyAppendArray:  # noqa: D401 - placeholder
            def __init__(self, *a, **k):
                raise ImportError("npy_append_array is not installed (pip install npy-append-array)")

        stub.NpyAppendArray = NpyAppendArray
        sys.modules["npy_append_array"] = stub
    try:
        from pypapi import papi_high  # lazy: optional
    except ImportError:
        pypapi = types.ModuleType("pypapi")
        pypapi.papi_high = papi_high = types.ModuleType("pypapi.papi_high")
        pypapi.events = types.SimpleNamespace(PAPI_DP_OPS="PAPI_DP_OPS")
        sys.modules.update({"pypapi": pypapi, "pypapi.papi_high": papi_high, "pypapi.events": pypapi.events})
    if not hasattr(papi_high, "start_counters"):
        state: dict[str, Any] = {}

        def start_counters(events):
            state["probe"] = new_probe(flops=True, tensors=False)  # our FLOPs pass's counter, attention included
            state["probe"].__enter__()

        def stop_counters():
            probe = state.pop("probe")
            probe.__exit__(None, None, None)
            return [probe_flops(probe)]

        papi_high.start_counters, papi_high.stop_counters = start_counters, stop_counters


def upstream_model(config_path: str | os.PathLike) -> tuple[Any, Namespace]:
    """get_metrics.cli_main's construction, from the config's folder. Returns (model, general args)."""
    import yaml  # lazy: heavy

    install_shims()
    from examples.speech_to_speech.benchmarking import core, get_metrics  # lazy: heavy
    from fairseq import options  # lazy: heavy

    config_path = Path(config_path).resolve()
    cwd = os.getcwd()
    os.chdir(config_path.parent)
    try:
        args = options.parse_args_and_arch(get_metrics.make_parser(), input_args=["", "--config", str(config_path)])
        config = yaml.safe_load(config_path.read_text())
        dict_args = vars(args)
        dict_args.update(config["general"])
        args = Namespace(**dict_args)
        stage_args = []
        for i in (1, 2, 3):
            if f"stage{i}" not in config:
                break
            tmp = copy.deepcopy(dict_args)
            tmp.update(config[f"stage{i}"])
            stage_args.append(Namespace(**tmp))
        kind = args.model_type
        if kind in ("S2S", "TTS"):
            model = core.SpeechGeneration(stage_args[0])
        elif kind == "S2UT":
            model = core.S2UT(stage_args[0], stage_args[1] if len(stage_args) > 1 else None)
        elif kind in ("MT", "S2T"):
            model = core.Processing(stage_args[0])
        elif kind == "2StageS2ST":
            model = core.Cascaded2StageS2ST(stage_args[0], stage_args[1])
        elif kind == "3StageS2ST":
            model = core.Cascaded3StageS2ST(stage_args[0], stage_args[2], stage_args[1])
        else:
            raise ValueError(f"upstream has no model_type {kind!r}")
    finally:
        os.chdir(cwd)
    return model, args


def main(argv: list[str] | None = None) -> int:
    """Run upstream get_metrics.py unchanged (same arguments: '' --config X)."""
    install_shims()
    from examples.speech_to_speech.benchmarking import get_metrics  # lazy: heavy

    sys.argv = ["get_metrics.py", *(sys.argv[1:] if argv is None else argv)]
    get_metrics.cli_main()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""s2st-stage OUT: build the tiny real fairseq models, datasets and configs into OUT.

With qwen-tts installed (the qwen extra) it also builds the tiny random Qwen3-TTS into OUT/qwen3tts
(with its model-assets.json manifest) and OUT/configs/Qwen3TTS.yaml; --no-qwen skips it.

--size full builds the released architectures at their released sizes instead (random weights, ~1 GB
of fairseq checkpoints, plus the full-size Qwen3-TTS where pytest_s2st.tiny.qwen_full exists) and prints
each model's parameter count next to the released checkpoint's.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, TypeVar

from ..errors import S2STError
from .args import OneLineParser, int_in, path_arg, refuse

T = TypeVar("T")
PROG = "s2st-stage"
MAX_SEED = 2**32 - 1  # np.random.seed's range (the builders seed numpy and torch with it)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog=PROG,
        description="Build tiny real fairseq models (S2T, MT, TTS, S2S, S2UT + vocoders), a speech npy "
                    "dataset, text datasets and one ready-to-run config per model type into OUT.")
    parser.add_argument("out", type=path_arg, help="output directory (created; existing files are overwritten)")
    parser.add_argument("--seed", type=int_in(0, MAX_SEED), default=None,
                        help=f"seed, 0 to {MAX_SEED} as numpy takes it (default: the embedded default's)")
    parser.add_argument("--no-qwen", action="store_true", help="skip the Qwen3-TTS model even when qwen-tts is installed")
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny",
                        help="tiny (default): small real models for tests; full: the released architectures at "
                             "their released sizes, random weights (~1 GB of fairseq checkpoints, more with Qwen3-TTS)")
    args = parser.parse_args(argv)
    import logging

    for name in ("hydra", "fairseq", "qwen_tts"):  # their DEBUG/INFO lines while building each model drown the summary
        logging.getLogger(name).setLevel(logging.WARNING)
    if args.size == "full":
        return _stage_full(args)
    from ..tiny import fairseq_tiny

    def build(seed: int) -> tuple[dict, tuple[Path, Path] | None]:
        result = fairseq_tiny.stage_all(args.out, seed=seed)
        return result, None if args.no_qwen else _stage_qwen(Path(result["out_dir"]))

    staged = _staged(args, fairseq_tiny.SEED, build)
    if staged is None:
        return 2
    (result, qwen), seed = staged
    out = Path(result["out_dir"])
    print(f"staged into {out} (seed {seed})")
    print(f"{'model':<14} {'KiB':>7} {'build s':>8}  sha256")
    for name, m in result["models"].items():
        print(f"{name:<14} {m['bytes'] / 1024:>7.1f} {m['build_s']:>8.2f}  {m['sha256']}  "
              f"{Path(m['path']).relative_to(out)}")
    _print_files(result, out, 8, 11)
    if qwen is not None:
        model_dir, config = qwen
        print(f"qwen3tts       {sum(f.stat().st_size for f in model_dir.rglob('*') if f.is_file()) / 1024:>7.1f}"
              f"           {model_dir.relative_to(out)} (manifest: model-assets.json)")
        print(f"config  {'Qwen3TTS':<11} {config.relative_to(out)}")
    return 0


def _print_files(result: dict, out: Path, dataset_width: int, config_width: int) -> None:
    """The staged datasets and configs, one line each, relative to OUT."""
    for name, p in result["datasets"].items():
        print(f"dataset {name:<{dataset_width}} {Path(p).relative_to(out)}")
    for name, p in result["configs"].items():
        print(f"config  {name:<{config_width}} {Path(p).relative_to(out)}")


def _staged(args: argparse.Namespace, default_seed: int, build: Callable[[int], T]) -> tuple[T, int] | None:
    """(build(seed), seed) with --seed or the builder's default; None once a refusal (OUT is a file, a builder's
    S2STError, an OSError) has been printed as one line on stderr."""
    try:
        if args.out.exists() and not args.out.is_dir():
            raise S2STError(f"{args.out}: exists and is not a directory")
        args.out.mkdir(parents=True, exist_ok=True)  # a parent that is a file: refused before any model is built
        seed = default_seed if args.seed is None else args.seed
        return build(seed), seed
    except S2STError as exc:
        refuse(PROG, exc)
    except OSError as exc:
        refuse(PROG, f"{args.out}: {exc.strerror or exc}")
    return None


def _stage_full(args: argparse.Namespace) -> int:
    from ..tiny import fairseq_full

    staged = _staged(args, fairseq_full.SEED, lambda seed: fairseq_full.stage_full(args.out, seed=seed,
                                                                                  qwen=not args.no_qwen))
    if staged is None:
        return 2
    result, seed = staged
    out = Path(result["out_dir"])
    print(f"staged full-size models into {out} (seed {seed})")
    print(f"{'model':<20} {'MiB':>7} {'build s':>8} {'params':>12} {'released':>12}  sha256")
    for name, m in result["models"].items():
        released = f"{m['released']:,}" if m["released"] else "unpublished"
        print(f"{name:<20} {m['bytes'] / 2**20:>7.1f} {m['build_s']:>8.2f} {m['params']:>12,} {released:>12}  "
              f"{m['sha256']}  {Path(m['path']).relative_to(out)}")
    _print_files(result, out, 10, 15)
    for name, entry in (result["qwen3tts"] or {}).items():
        print(f"qwen3tts {name}: {entry}")
    return 0


def _stage_qwen(out: Path) -> tuple[Path, Path] | None:
    import importlib.util

    if importlib.util.find_spec("qwen_tts") is None:
        print("qwen-tts not installed: no tiny Qwen3-TTS (in the clone: pip install -e '.[qwen]')")
        return None
    from ..defaults import QWEN_YAML
    from ..service.workload import DEFAULT_WORKLOAD
    from ..tiny.qwen_tiny import build_tiny_qwen3tts

    model_dir = build_tiny_qwen3tts(out / "qwen3tts")
    config = out / "configs" / "Qwen3TTS.yaml"
    config.write_text(QWEN_YAML.format(path="../qwen3tts", workload=DEFAULT_WORKLOAD))  # relative: the folder can be moved
    return model_dir, config


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

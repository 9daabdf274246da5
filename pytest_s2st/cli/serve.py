"""s2st-serve: the reference HTTP/SSE speech server around a configured pipeline (or a demo tone).

    s2st-serve --case case.json --port 0 --identity-output F   # a case resolved by pytest (Case.to_dict)
    s2st-serve --s2st-config x.yaml --port P [--identity-output F] [--queue-size N]
    s2st-serve --demo-tone --port 0 --identity-output F     # no model; port 0 = any free port

Serves this project's SSE protocol and OpenAI's speech API on POST /v1/audio/speech (GET /v1/models,
GET /v1/models/{id} and GET /v1/audio/voices beside it; see service/server.py); --served-model-name names
the model as vLLM's flag does, so a client that sends a hub id (vLLM-Omni's bench_tts.py) is served. Binds
loopback only. The identity file (code version, case id, resolved settings, asset hashes, device, threads, bound
port) is written once the server listens; GET /health answers 200 from then on.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from ..assets import sha256_file
from ..errors import S2STError
from ..inputs import load_json, show
from ..measure.device import CHOICES, parse_device, resolve_device
from ..pipelines import base
from ..pipelines.base import declares_serves_speech, one_of, speech_types, stream_refusal, streaming_types
from ..service.stream import MAX_FRAMES, no_stream_reason
from ..service.stream import options as stream_options
from .args import OneLineParser, float_in, int_in, path_arg, refuse

PROG = "s2st-serve"
MAX_THREADS = 4096
MAX_DELAY_S = 3600.0  # --demo-delay-s: an hour of simulated model time per request is already no benchmark


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent, capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# the modules whose code decides what the server answers (routes, answers, the model thread, request checks): the
# identity's hash covers them all, so an edit to any of them shows as a different server
SERVING_MODULES = ("server", "answers", "model_worker", "synthesizers", "request_model", "openai_api", "stream",
                   "resample")


def serving_code_sha256() -> str:
    folder = Path(__file__).resolve().parent.parent / "service"
    digest = hashlib.sha256()
    for name in SERVING_MODULES:
        digest.update(f"{name}:{sha256_file(folder / f'{name}.py')}\n".encode())
    return digest.hexdigest()


def code_identity() -> dict[str, Any]:
    try:
        version = metadata.version("pytest-s2st")
    except metadata.PackageNotFoundError:
        version = None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "package": "pytest-s2st",
        "version": version,
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "server_module_sha256": serving_code_sha256(),  # the key's old name: every serving module now
        "python": platform.python_version(),
    }


def _threads(asked: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"cpu_count": os.cpu_count(), "torch": None}
    if "torch" in sys.modules:  # only when the pipeline itself loaded torch
        torch = sys.modules["torch"]
        if asked:
            torch.set_num_threads(asked)
        out["torch"] = torch.get_num_threads()
    return out


def _device(value: str) -> str:
    """--device: checked while parsing (the demo tone ignores it, a case resolves it later)."""
    try:
        parse_device(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"'{show(value, 80)}': {exc}") from None
    return value


def _check_identity_output(path: Path | None) -> None:
    """Refused before the server starts rather than once it listens: a directory, or a file in no directory."""
    if path is None:
        return
    if path.is_dir():
        raise S2STError(f"--identity-output {path}: is a directory")
    if not path.parent.is_dir():
        raise S2STError(f"--identity-output {path}: directory {path.parent} not found")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--case", type=path_arg, help="a resolved case as JSON (Case.to_dict), e.g. written by pytest")
    src.add_argument("--s2st-config", type=path_arg, help="benchmark YAML whose pipeline ends in speech")
    src.add_argument("--demo-tone", action="store_true", help="no model: a deterministic sine per request")
    p.add_argument("--port", type=int_in(0, 65535), required=True,
                   help="TCP port (0: any free port, see the identity file)")
    p.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    p.add_argument("--identity-output", type=path_arg,
                   help="write the server identity JSON here (its directory must exist)")
    p.add_argument("--queue-size", type=int_in(1), default=8, help="requests that may wait for the model (default 8)")
    p.add_argument("--chunk-samples", type=int_in(1), default=4800, help="PCM samples per SSE audio event")
    p.add_argument("--served-model-name", nargs="+", metavar="NAME",
                   help="the model id(s) GET /v1/models lists and an OpenAI request's \"model\" may name, as "
                        "vLLM's flag (default: the case id, or demo-tone); another name is answered 404")
    p.add_argument("--device", type=_device, help=f"{' | '.join(CHOICES)} (default: the case's device setting)")
    p.add_argument("--threads", type=int_in(1, MAX_THREADS),
                   help="torch intra-op threads (default: the case's threads setting)")
    p.add_argument("--demo-delay-s", type=float_in(0.0, MAX_DELAY_S), default=0.0,
                   help="--demo-tone: seconds of simulated model time")
    p.add_argument("--stream", action="store_true",
                   help="decode in chunks and send each as soon as it is decoded (also: serve.stream: true)")
    p.add_argument("--stream-chunk-frames", type=int_in(1, MAX_FRAMES),
                   help="codec frames per streamed chunk (default: serve.chunk_frames, 12)")
    p.add_argument("--stream-left-context", type=int_in(0, MAX_FRAMES),
                   help="frames of left context decoded before each chunk (default: serve.left_context_frames, 25)")
    return p


def _load_case(args: argparse.Namespace):
    """The case to serve: as pytest resolved it (--case), or a YAML resolved here like pytest would."""
    from ..cases import Case, load_case  # lazy: heavy

    if args.s2st_config is not None:
        return load_case(args.s2st_config, {}, lambda name: None)

    data = load_json(args.case, "the case JSON")
    try:
        return Case.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise S2STError(f"{args.case}: not a case written by Case.to_dict: {type(exc).__name__}: {exc}") from None


def _config_identity(path: Path) -> dict[str, Any]:
    try:
        digest = sha256_file(path)
    except OSError:  # --case: the YAML may be gone; the case JSON is what was served
        digest = None
    return {"path": str(path), "sha256": digest}


def _build(args: argparse.Namespace) -> tuple[Any, dict[str, Any], Any, Any]:
    """(synthesizer, identity part, close callable, (stream synthesizer, its options) or None)."""
    # lazy: heavy
    from ..service.synthesizers import demo_tone_synthesizer, pipeline_stream_synthesizer, pipeline_synthesizer

    if args.demo_tone:
        streams = one_of(streaming_types())
        if args.stream:
            raise S2STError(f"--stream: the demo tone is one whole waveform; stream a {streams} case")
        for flag, value in (("--stream-chunk-frames", args.stream_chunk_frames),
                            ("--stream-left-context", args.stream_left_context)):
            if value is not None:  # refused rather than silently ignored
                raise S2STError(f"{flag}: the demo tone does not stream, so it would be ignored; it applies to "
                                f"a {streams} case served with --stream")
        synth = demo_tone_synthesizer(delay_s=args.demo_delay_s)
        return synth, {"model_type": "demo-tone", "assets": {}, "device": "cpu", "threads": _threads(None),
                       "demo_delay_s": args.demo_delay_s}, lambda: None, None

    from ..cases import settings_to_json  # lazy: heavy

    case = _load_case(args)
    cfg = case.config
    if not case.serves_speech:
        # refuse at start rather than answer every request with HTTP 500
        why = ("general.serves_speech is false" if not declares_serves_speech(cfg.model_type) else
               f"model_type {cfg.model_type} takes speech features or gives text")
        raise S2STError(f"{cfg.path}: does not serve speech from text ({why}); serve a {one_of(speech_types())} case")
    streaming = stream_options(args.stream, args.stream_chunk_frames, args.stream_left_context, cfg.serve,
                               str(cfg.path))
    if streaming is not None and stream_refusal(cfg.model_type):  # refused before any model loads
        raise S2STError(f"{cfg.path}: --stream / serve.stream: {stream_refusal(cfg.model_type)}")
    device = resolve_device(args.device or case.settings.get("device") or "cpu")
    # base.build_pipeline, looked up when called: the CLI fuzz tests trip on it
    pipeline = base.build_pipeline(cfg.model_type, cfg.stages, device=device.name, config_path=cfg.path,
                                   config_lines=cfg.lines)
    threads = args.threads or case.settings.get("threads")
    stream = None
    if streaming is not None:
        if no_stream_reason(pipeline):
            pipeline.close()
            raise S2STError(f"{cfg.path}: --stream: {no_stream_reason(pipeline)}")
        stream = (pipeline_stream_synthesizer(pipeline, streaming), streaming.to_dict())
    return pipeline_synthesizer(pipeline), {
        "case_id": case.case_id,
        "name": cfg.name,  # the config's name (general.name): the model id GET /v1/models lists
        "model_type": cfg.model_type,
        "config": _config_identity(cfg.path),
        "settings": settings_to_json(case.settings),
        "assets": pipeline.assets(),
        "device": device.describe(),
        "threads": _threads(int(threads) if threads else None),
    }, pipeline.close, stream


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from ..service.server import check_loopback, run_server  # lazy: heavy

    try:
        check_loopback(args.host)
        if args.served_model_name and not all(name.strip() for name in args.served_model_name):
            raise S2STError(f"--served-model-name {args.served_model_name!r}: names must not be empty")
        _check_identity_output(args.identity_output)
        synth, model_identity, close, stream = _build(args)
        identity = {"code": code_identity(), **model_identity}
        try:
            run_server(synth, args.host, args.port, identity=identity, identity_path=args.identity_output,
                       queue_size=args.queue_size, chunk_samples=args.chunk_samples,
                       served_model_names=args.served_model_name,
                       stream=stream[0] if stream else None, stream_options=stream[1] if stream else None)
        finally:
            close()
    except (S2STError, OSError) as exc:  # OSError: e.g. the port is taken
        return refuse(PROG, exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

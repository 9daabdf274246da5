"""Full-size Qwen3-TTS behind `s2st-serve` on CPU (issue 18 item 4, issue 17 item 7), opt-in (marked
`fullsize` by benchmarks/conftest.py, deselected unless -m selects): `make bench-full-stream`. The model: $QWEN3TTS_FULL_DIR, else the cached build of
pytest_s2st.tiny.qwen_full (deterministic, ~2.5 GB; the pipeline checks every file's SHA256 at load).

* test_talker_dtype_step_time: one process loads the model once and times, interleaved float32 / bfloat16 /
  float32 / bfloat16 (bf16 -> fp32 -> bf16 is exact, the checkpoint is bf16), a short generation (per codec
  frame: one talker step + its code-predictor steps) and one chunk decode of the 12 Hz codec (chunk + left
  context frames): which dtype configs/full/qwen3tts.yaml should use on this CPU.
* test_stream_candidate_vs_baseline: the seed's flow on one command, as users run it: a pytest session with
  the candidate config (serve.stream: true, quality.baseline: the non-streaming config of the same model) and
  its frozen policy; both reference servers, warm-ups, WAVs, chunk timelines, AB/BA over the levels. Reports
  TTFA p50/p99, RTF, underrun p99, continuity of both, the gate's verdict and scores, the candidate/baseline
  TTFA ratio, and the streamed-vs-non-streamed audio bound from the evidence WAVs (max |diff| in LSB, SNR).

Knobs (environment): S2ST_FULL_STREAM_LEVELS (concurrency levels, default "1"), S2ST_FULL_MAX_NEW_TOKENS
(codec frames, default 100 = 8 s at 12.5 frames/s: a random model rarely samples EOS), S2ST_FULL_WARMUP
(warm-up requests per server, default 1), S2ST_FULL_DTYPE
(default: the config's), S2ST_FULL_REPORT_DIR (JSON of each table).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qwen_tts")

from test_full_size import _report  # noqa: E402  (prints a table and keeps its JSON under $S2ST_FULL_REPORT_DIR)

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "full" / "qwen3tts.yaml"
TEXT = "The library on the corner stays open late on Thursdays, so I usually finish my reading there."
# frozen before measuring: the goal (candidate TTFA <= 0.2x baseline, i.e. >= 80 % sooner), the
# baseline's audio within 20 dB SNR (the tiny model's default 12/25 chunking measured 46 dB), same length
POLICY = {"baseline": "base.yaml", "speed_metric": "ttfa_s", "min_improvement_pct": 80, "min_snr_db": 20,
          "max_duration_change_pct": 1}
SERVICE_TEST = '''
def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
'''


def _model_dir() -> str:
    given = os.environ.get("QWEN3TTS_FULL_DIR")
    if given:
        return given
    from pytest_s2st.tiny.qwen_full import full_qwen3tts_dir

    return str(full_qwen3tts_dir())


def _max_new_tokens() -> int:
    return int(os.environ.get("S2ST_FULL_MAX_NEW_TOKENS", "100"))


def test_talker_dtype_step_time():
    """Per codec frame (talker step + code predictor) and per chunk decode, float32 vs bfloat16, interleaved."""
    import torch

    from pytest_s2st.pipelines.qwen3tts import build

    frames, rounds = 6, 2
    t0 = time.perf_counter()
    p = build([{"path": _model_dir(), "max_new_tokens": frames, "dtype": "bfloat16", "language": "English"}],
              device="cpu", config_path=CONFIG)
    load_s = time.perf_counter() - t0
    inner = p.model.model
    codec = inner.speech_tokenizer.model
    stamps: list[float] = []
    handle = inner.talker.register_forward_hook(lambda *a: stamps.append(time.perf_counter()))
    x = p.prepare_sample({"id": "a", "text": TEXT, "seed": 7})
    g = torch.Generator().manual_seed(0)
    cfg = codec.decoder.config  # a 12-frame chunk + 25 frames of left context, the config's defaults
    codes = torch.randint(0, cfg.codebook_size, (1, cfg.num_quantizers, 37), generator=g)
    rows: dict[str, dict[str, list[float]]] = {}
    try:
        for r in range(rounds):
            for name in ("float32", "bfloat16"):
                dtype = getattr(torch, name)
                inner.to(dtype)
                codec.to(dtype)
                stamps.clear()
                t = time.perf_counter()
                out = p.stages[0].forward(x)
                total = time.perf_counter() - t
                steps = np.diff(stamps)  # talker call i+1 - call i: one frame (talker + 15 code-predictor steps)
                with torch.inference_mode():
                    t = time.perf_counter()
                    codec.decoder(codes)
                    decode = time.perf_counter() - t
                row = rows.setdefault(name, {"frame_step_s": [], "generate_s": [], "chunk_decode_s": []})
                if r or rounds == 1:  # the first round warms each dtype's kernels up
                    row["frame_step_s"].append(float(np.median(steps)))
                    row["generate_s"].append(total)
                    row["chunk_decode_s"].append(decode)
                print(f"round {r} {name}: frame step {np.median(steps):.3f} s, generate {total:.1f} s "
                      f"({len(out['waveform']) / out['sample_rate']:.2f} s audio), chunk decode {decode:.2f} s",
                      flush=True)
    finally:
        handle.remove()
    result = {"load_s": round(load_s, 1), "threads": torch.get_num_threads(), "frames": frames,
              **{name: {k: round(float(np.median(v)), 3) for k, v in row.items()} for name, row in rows.items()}}
    _report("qwen_full_dtype", result)
    assert all(result[n]["frame_step_s"] > 0 for n in ("float32", "bfloat16"))


def _pcm(path: Path) -> np.ndarray:
    import soundfile as sf

    data, _ = sf.read(str(path), dtype="int16", always_2d=False)
    return data.astype(np.int64)


def _audio_bound(base_dir: Path, cand_dir: Path) -> dict:
    """Streamed vs non-streamed int16 PCM of the same request id (warm-ups included: same text, same seed):
    max |diff| in LSB and SNR in dB (None when bit-equal), per id."""
    from pytest_s2st.runs import load_run

    base, cand = load_run(base_dir), load_run(cand_dir)
    out = {}
    for rid in sorted(set(base.records) & set(cand.records)):
        if not (base.wav(rid).is_file() and cand.wav(rid).is_file()):
            continue
        a, b = _pcm(base.wav(rid)), _pcm(cand.wav(rid))
        n = min(len(a), len(b))
        d = a[:n] - b[:n]
        noise = float((d.astype(float) ** 2).sum())
        out[rid] = {"samples": [len(a), len(b)], "max_abs_diff_lsb": int(np.abs(d).max()) if n else None,
                    "bit_equal": len(a) == len(b) and noise == 0.0,
                    "snr_db": round(10 * np.log10(float((a[:n].astype(float) ** 2).sum()) / noise), 2) if noise else None}
    return out


def _row(summary: dict) -> dict:
    def stat(name, key):
        value = (summary.get(name) or {}).get(key)
        return None if value is None else round(value, 3)

    return {"n_ok": summary.get("n_ok"), "ttfa_p50_s": stat("ttfa_s", "p50"), "ttfa_p99_s": stat("ttfa_s", "p99"),
            "rtf_p50": stat("rtf", "p50"), "latency_p50_s": stat("latency_s", "p50"),
            "underrun_p99_s": stat("underrun_s", "p99"), "continuity_rate": summary.get("continuity_rate"),
            "audio_s": stat("audio_duration_s", "p50")}


def test_stream_candidate_vs_baseline(tmp_path):
    """The candidate session, as a user runs it; the table, the verdicts and the audio bound come from its
    benchmark JSON and evidence."""
    import yaml

    from pytest_s2st.runs import read_summary

    levels = [int(c) for c in os.environ.get("S2ST_FULL_STREAM_LEVELS", "1").split(",")]
    base = yaml.safe_load(CONFIG.read_text())
    base["stage1"]["path"] = _model_dir()
    base["stage1"]["max_new_tokens"] = _max_new_tokens()
    if os.environ.get("S2ST_FULL_DTYPE"):
        base["stage1"]["dtype"] = os.environ["S2ST_FULL_DTYPE"]
    base["general"].update(workload="wl.jsonl", concurrency=levels, warmup=int(os.environ.get("S2ST_FULL_WARMUP", "1")),
                           request_timeout=3600)
    serve = base.pop("serve")
    cand = json.loads(json.dumps(base))
    base["general"]["name"], cand["general"]["name"] = "base", "stream"
    cand["serve"] = dict(serve, stream=True)
    cand["quality"] = POLICY
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    (tmp_path / "stream.yaml").write_text(yaml.safe_dump(cand, sort_keys=False))
    # one request per slot of the highest level (at c4 one line would leave 3 slots idle); each its own seed
    (tmp_path / "wl.jsonl").write_text("".join(
        json.dumps({"id": f"u{i + 1}", "text": TEXT, "language": "en", "voice": "Vivian", "seed": 7 + i}) + "\n"
        for i in range(max(levels))))
    (tmp_path / "test_service.py").write_text(SERVICE_TEST)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-s", "--benchmark-json=out.json",
           f"--s2st-config={tmp_path / 'stream.yaml'}", "test_service.py"]
    print("command (in", tmp_path, "):", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    print(proc.stdout, flush=True)
    assert (tmp_path / "out.json").is_file(), proc.stdout[-3000:]
    rows = {}
    for bench in json.loads((tmp_path / "out.json").read_text())["benchmarks"]:
        data = bench["extra_info"]["s2st_service"]
        c = data["concurrency"]
        base_dir = Path(data["baseline_dir"])
        baseline = read_summary(base_dir)["by_concurrency"][str(c)]["summary"]
        cand_row, base_row = _row(data["summary"]), _row(baseline)
        ratio = (cand_row["ttfa_p50_s"] / base_row["ttfa_p50_s"]
                 if cand_row["ttfa_p50_s"] and base_row["ttfa_p50_s"] else None)
        rows[f"c{c}"] = {"order": data.get("order"), "baseline": base_row, "candidate": cand_row,
                         "ttfa_ratio_p50": ratio and round(ratio, 4), "gate": data.get("gate"),
                         "stream": data["identity"].get("stream"),
                         "audio_bound": _audio_bound(base_dir, Path(data["evidence_dir"]))}
    _report("qwen_full_stream", {"wall_s": round(wall, 1), "dtype": base["stage1"]["dtype"],
                                 "max_new_tokens": base["stage1"]["max_new_tokens"], "levels": rows,
                                 "command": " ".join(cmd)})
    assert rows and proc.returncode in (0, 1), proc.stdout[-3000:]

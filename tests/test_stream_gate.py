"""The seed's flow on one command, on the tiny Qwen3-TTS: a non-streaming baseline server and a streaming
candidate server on the same model, paired AB/BA, warm-ups, WAVs, chunk timelines, the frozen policy.
A candidate that streams with left context PASSes (TTFA improves by the policy's share, the audio is the
baseline's within min_snr_db); one that streams without left context FAILs on quality."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("qwen_tts")

# vLLM-Omni's own continuity function, the field's client, as an oracle: loaded by path from its wheel
# (pure Python; importing the package would import vLLM). `make install` downloads the wheel without its
# dependencies into <venv>/wheels; it is never copied into this repository.
VLLM_OMNI_WHEEL = Path(os.environ.get("S2ST_VLLM_OMNI_WHEEL")
                       or Path(sys.prefix) / "wheels" / "vllm_omni-0.30.0-py3-none-any.whl")
CONTINUITY = "vllm_omni/benchmarks/audio_continuity.py"


def vllm_omni_continuity(tmp_path: Path):
    if not VLLM_OMNI_WHEEL.is_file():
        pytest.skip(f"{VLLM_OMNI_WHEEL} missing: make install fetches it "
                    "(pip download --no-deps vllm-omni==0.30.0 -d <venv>/wheels)")
    with zipfile.ZipFile(VLLM_OMNI_WHEEL) as wheel:
        source = tmp_path / "audio_continuity.py"
        source.write_bytes(wheel.read(CONTINUITY))
    spec = importlib.util.spec_from_file_location("vllm_omni_audio_continuity", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves string annotations through sys.modules
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module.compute_continuity_stats


SERVICE_TEST = '''
def test_service(s2st_service, s2st_workload, s2st_concurrency, s2st_load):
    s2st_load(s2st_service, s2st_workload, concurrency=s2st_concurrency)
'''


def test_streaming_candidate_passes_and_a_seam_corrupting_one_fails(pytester):
    from pytest_s2st.tiny.qwen_tiny import tiny_qwen3tts_dir

    root = pytester.path
    (root / "wl.jsonl").write_text("".join(json.dumps(item) + "\n" for item in (
        {"id": "en1", "text": "Turn left at the next corner and stop.", "language": "en", "voice": "Vivian", "seed": 1},
        {"id": "en2", "text": "Please open the window before dinner.", "language": "en", "voice": "Ryan", "seed": 2})))
    general = ("  model_type: Qwen3TTS\n  workload: wl.jsonl\n  concurrency: [1]\n  warmup: 1\n  threads: 1\n"
               "  request_timeout: 900\n")  # a loaded 2-core VM took 46 s for one tiny baseline request
    stage = f"stage1:\n  path: {tiny_qwen3tts_dir()}\n  max_new_tokens: 40\n"
    # frozen before measuring: first audio at least 40 % sooner (4 of ~40 frames: ~10x sooner by
    # construction), the same audio (>= 20 dB; with context measured 44-46 dB, without 1.5 dB), same length
    policy = ("quality:\n  baseline: base.yaml\n  speed_metric: ttfa_s\n  min_improvement_pct: 40\n"
              "  min_snr_db: 20\n  max_duration_change_pct: 1\n")
    (root / "base.yaml").write_text(f"general:\n  name: base\n{general}{stage}")
    (root / "stream.yaml").write_text(f"general:\n  name: stream\n{general}{stage}"
                                      "serve:\n  stream: true\n  chunk_frames: 4\n  left_context_frames: 25\n" + policy)
    (root / "seams.yaml").write_text(f"general:\n  name: seams\n{general}{stage}"
                                     "serve:\n  stream: true\n  chunk_frames: 4\n  left_context_frames: 0\n" + policy)
    pytester.makepyfile(test_service=SERVICE_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", "--benchmark-json=out.json",
                                           f"--s2st-config={root / 'stream.yaml'}", f"--s2st-config={root / 'seams.yaml'}")
    out = result.stdout.str()
    assert result.parseoutcomes() == {"passed": 1, "failed": 1}, out
    assert "test_service[Qwen3TTS-stream-c1] PASSED" in out and "test_service[Qwen3TTS-seams-c1] FAILED" in out
    result.stdout.fnmatch_lines(["pcm snr vs baseline * dB < 20 dB *"])
    benches = {b["name"]: b["extra_info"]["s2st_service"] for b in json.loads((root / "out.json").read_text())["benchmarks"]}
    good, bad = benches["test_service[Qwen3TTS-stream-c1]"], benches["test_service[Qwen3TTS-seams-c1]"]
    assert good["streaming"] is True and good["identity"]["stream"] == {"chunk_frames": 4, "left_context_frames": 25}
    assert good["gate"]["status"] == "PASS" and good["gate"]["speedup"]["c1"] > 1 / 0.6
    assert good["gate"]["metrics"]["quality"]["pcm snr vs baseline"]["worst_db"] >= 20
    assert bad["gate"]["status"] == "FAIL" and not any("ttfa" in r for r in bad["gate"]["reasons"])
    # chunk timelines: every measured streamed request arrived in several chunks, the baseline's too
    records = [json.loads(line) for line in open(f"{good['evidence_dir']}/requests.jsonl")]
    assert records and all(len(r["chunks"]) >= 8 for r in records if r["status"] == "ok")

    # cross-check: vLLM-Omni's continuity function on the same recorded timelines == ours
    from pytest_s2st.runs import playback_metrics

    compute = vllm_omni_continuity(root)
    checked = 0
    for record in records + [json.loads(line) for line in open(f"{bad['evidence_dir']}/requests.jsonl")]:
        chunks = [c for c in record["chunks"] if c[1] > 0]
        theirs = compute([c[0] for c in chunks], [c[1] for c in chunks], record["sample_rate"])
        ours = playback_metrics(record)
        assert ours["underrun_s"] == pytest.approx(theirs.max_underrun_s, abs=1e-12), record["id"]
        assert ours["underrun_events"] == theirs.underrun_event_count, record["id"]
        assert ours["continuity_ok"] == theirs.is_continuous, record["id"]
        checked += 1
    assert checked >= 4

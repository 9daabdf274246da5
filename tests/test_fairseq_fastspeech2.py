"""FastSpeech2 (non-autoregressive TTS) through fairseq's own generator: alone and as a cascade's TTS."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fairseq")

import torch  # noqa: E402

from pytest_s2st.config import load_config  # noqa: E402
from pytest_s2st.pipelines import base  # noqa: E402
from pytest_s2st.tiny import fairseq_tiny  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HOP = 256  # the staged features' hop_len_t at 22.05 kHz = the HiFi-GAN's upsampling


pytestmark = pytest.mark.usefixtures("one_thread")  # staged and one_thread: tests/conftest.py


def build(staged: Path, name: str, edit=None):
    config = staged / "configs" / f"{name}.yaml"
    cfg = load_config(config, known_model_types=base.known_model_types())
    stages = cfg.stages
    if edit:
        edit(stages)
    samples = list(np.load(config.parent / cfg.general["dataset_path"], allow_pickle=True))
    pipe = base.build_pipeline(cfg.model_type, stages, device="cpu", config_path=config)
    return pipe, samples[: cfg.general["dataset_size"]]


def test_fastspeech2_tts_runs_end_to_end(staged):
    from fairseq.models.text_to_speech.fastspeech2 import FastSpeech2Model
    from fairseq.speech_generator import NonAutoregressiveSpeechGenerator

    pipe, samples = build(staged, "TTS-FastSpeech2")
    (tts,) = pipe.stages
    assert pipe.model_type == "TTS" and tts.name == "tts"
    assert isinstance(tts.model, FastSpeech2Model) and not tts.model.training
    assert isinstance(tts.generator, NonAutoregressiveSpeechGenerator)
    assert type(tts.generator.vocoder).__name__ == "HiFiGANVocoder"
    assert len(samples) == fairseq_tiny.DATASET_SIZE
    for sample in samples:
        x = pipe.prepare_sample(sample)
        out = tts.forward(x)
        wav = out["waveform"]
        assert wav.dtype == np.float32 and wav.ndim == 1 and np.isfinite(wav).all() and np.abs(wav).max() <= 1
        assert out["sample_rate"] == 22050
        # durations pinned: every token (EOS included) lasts FS2_FRAMES_PER_TOKEN frames
        n_tokens = int(sample["net_input"]["src_lengths"][0])
        assert wav.size == n_tokens * fairseq_tiny.FS2_FRAMES_PER_TOKEN * HOP
        assert np.array_equal(tts.forward(pipe.prepare_sample(sample))["waveform"], wav)  # deterministic
    assert {Path(p).name for p in pipe.assets()} == {"checkpoint.pt", "config.yaml", "dict.txt",
                                                     "hifigan.pt", "hifigan.json"}
    pipe.close()


def test_fastspeech2_takes_workload_text_samples(staged):
    pipe, tokens = build(staged, "TTS-FastSpeech2")
    texts = [json.loads(line) for line in (staged / "data" / "text_es.jsonl").read_text().splitlines()]
    a = pipe.run(texts[0])["waveform"]
    assert np.array_equal(a, pipe.run(tokens[0])["waveform"])  # the token npy holds the same text


def test_fastspeech2_as_the_tts_of_a_2stage_cascade(staged):
    pipe, samples = build(staged, "2StageS2ST-FastSpeech2")
    s2t, tts = pipe.stages
    assert pipe.model_type == "2StageS2ST" and [s.name for s in pipe.stages] == ["s2t", "tts"]
    assert type(tts.model).__name__ == "FastSpeech2Model"
    for sample in samples:
        text = s2t.forward(pipe.prepare_sample(sample))["text"]
        x = s2t.to_next_input({"text": text})
        out = tts.forward(x)
        n_tokens = len(text.split()) + 1  # + EOS
        assert out["waveform"].size == n_tokens * fairseq_tiny.FS2_FRAMES_PER_TOKEN * HOP
        assert np.array_equal(pipe.run(sample)["waveform"], out["waveform"])
    pipe.close()


def test_fastspeech2_with_griffin_lim(staged):
    """fairseq's default vocoder: Griffin-Lim's iSTFT gives hop * (frames - 1) samples."""
    pytest.importorskip("librosa")

    def griffin_lim(stages):
        stages[0]["vocoder"] = "griffin_lim"

    pipe, samples = build(staged, "TTS-FastSpeech2", griffin_lim)
    assert type(pipe.stages[0].generator.vocoder).__name__ == "GriffinLimVocoder"
    out = pipe.run(samples[0])
    frames = int(samples[0]["net_input"]["src_lengths"][0]) * fairseq_tiny.FS2_FRAMES_PER_TOKEN
    assert out["waveform"].size == (frames - 1) * HOP and np.isfinite(out["waveform"]).all()


def test_upstream_core_fails_on_fastspeech2_and_matches_ours_once_fed(staged):
    """Upstream core.py's SpeechGeneration raises KeyError on FastSpeech2 (in a cascade: 'target_lengths';
    on a token npy sample 'prev_output_tokens' first); given those keys as None it makes, bit for bit,
    our waveforms. A subprocess: importing upstream changes process-wide state."""
    import subprocess
    import sys

    code = r"""
import copy, json, sys, numpy as np, torch
from pathlib import Path
from pytest_s2st.config import load_config
from pytest_s2st.pipelines import base
from pytest_s2st.pipelines.fairseq_upstream import upstream_model
torch.set_num_threads(1)
result = {}
def fails(fn, *args):
    try:
        fn(*args)
    except KeyError as exc:
        return str(exc)
def fed(sample):
    sample = copy.deepcopy(sample)
    sample["net_input"].setdefault("prev_output_tokens", None)
    sample["target_lengths"] = None
    return sample
for name in ("TTS-FastSpeech2", "2StageS2ST-FastSpeech2"):
    cp = Path(sys.argv[1]) / "configs" / f"{name}.yaml"
    up, general = upstream_model(cp)
    sample = np.load(cp.parent / general.dataset_path, allow_pickle=True)[0]
    failure = fails(up, copy.deepcopy(sample))
    if name.startswith("TTS"):
        theirs = up(fed(sample))
    else:
        text = up.s2t.decode_target(up.s2t(copy.deepcopy(sample)))
        theirs = up.tts(fed(up.tts.processTextInput(text)))
    theirs = theirs[0]["waveform"].detach().numpy().reshape(-1)
    cfg = load_config(cp, known_model_types=base.known_model_types())
    ours = base.build_pipeline(cfg.model_type, cfg.stages, device="cpu", config_path=cp).run(sample)["waveform"]
    result[name] = [failure, ours.shape == theirs.shape and bool(np.array_equal(ours, theirs))]
print("RESULT " + json.dumps(result))
"""
    proc = subprocess.run([sys.executable, "-c", code, str(staged)], capture_output=True, text=True,
                          cwd=REPO, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert result == {"TTS-FastSpeech2": ["'prev_output_tokens'", True],
                      "2StageS2ST-FastSpeech2": ["'target_lengths'", True]}

"""Full-size fairseq models at the config level: parameter counts against the released checkpoints' (built on
the meta device: no weights), one against a count by hand, determinism on a small part, the configs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("fairseq")

from pytest_s2st.tiny import fairseq_full  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def counts():
    return fairseq_full.param_counts()


def test_every_published_count_within_5_percent(counts):
    published = {n: c for n, c in counts.items() if c["released"] is not None}
    assert sorted(published) == ["fastspeech2", "hifigan", "mt", "s2t", "tts"]
    for name, c in published.items():
        assert abs(c["params"] / c["released"] - 1) <= 0.05, (name, c["params"], c["released"])


def test_unpublished_counts_are_pinned(counts):
    """No released count to hold them against: the recipe's architecture, pinned so a change shows."""
    assert counts["s2ut"]["params"] == 27_002_880 and counts["code_hifigan"]["params"] == 13_370_243


def test_s2t_count_by_hand(counts):
    """s2t_transformer_s counted by hand: conv subsampler, 12 pre-norm encoder layers, 6 decoder layers with
    cross-attention, the 10k embedding shared with the output projection, sinusoidal positions (no weights)."""
    d, ffn, vocab, feat, mid, k = 256, 2048, 10_000, 80, 1024, 5
    conv = (feat * mid * k + mid) + (mid // 2 * 2 * d * k + 2 * d)
    attn, norm, ff = 4 * (d * d + d), 2 * d, (d * ffn + ffn) + (ffn * d + d)
    encoder = 12 * (attn + ff + 2 * norm) + norm
    decoder = 6 * (2 * attn + ff + 3 * norm) + norm
    assert counts["s2t"]["params"] == conv + encoder + decoder + vocab * d


def test_hifigan_v1_count_by_hand(counts):
    """HiFi-GAN V1 (Kong et al. 2020: 13.92 M): weight-normed convs count weight_v + weight_g + bias."""
    def conv(cin, cout, k, transposed=False):  # weight_g has one entry per out channel (dim 0 of the weight)
        return cin * cout * k + (cin if transposed else cout) + cout

    cfg = fairseq_full.HIFIGAN_V1
    c = cfg["upsample_initial_channel"]
    total = conv(cfg["model_in_dim"], c, 7)
    for i, (u, k) in enumerate(zip(cfg["upsample_rates"], cfg["upsample_kernel_sizes"])):
        cin, cout = c // 2 ** i, c // 2 ** (i + 1)
        total += conv(cin, cout, k, transposed=True)
        for rk in cfg["resblock_kernel_sizes"]:
            total += 6 * conv(cout, cout, rk)  # ResBlock1: convs1 and convs2, 3 dilations each
    total += conv(c // 2 ** len(cfg["upsample_rates"]), 1, 7)
    assert counts["hifigan"]["params"] == total
    assert abs(total / 13_920_000 - 1) < 0.005


def test_same_seed_same_bytes_on_a_vocoder(tmp_path):
    """Determinism on a small part (a 13 M-parameter unit vocoder, not the GBs): same seed -> same SHA256."""
    spec = fairseq_full.SPECS["code_hifigan"]
    paths = []
    for sub, seed in (("a", 1), ("b", 1), ("c", 2)):
        (tmp_path / sub).mkdir()
        paths.append(fairseq_full._save_vocoder(spec, tmp_path / sub, "v", seed, fairseq_full._pin_unit_durations))
    a, b, c = (fairseq_full.sha256_file(p) for p in paths)
    assert a == b and a != c
    assert (tmp_path / "a" / "v.json").read_text() == (tmp_path / "b" / "v.json").read_text()


def test_datasets_are_deterministic_and_sized(tmp_path):
    import numpy as np

    first = fairseq_full.build_datasets(tmp_path / "a", 1)
    second = fairseq_full.build_datasets(tmp_path / "b", 1)
    assert {k: fairseq_full.sha256_file(p) for k, p in first.items()} == \
           {k: fairseq_full.sha256_file(p) for k, p in second.items()}
    speech = np.load(first["speech"], allow_pickle=True)
    lengths = [int(s["net_input"]["src_lengths"]) for s in speech]
    assert len(lengths) == fairseq_full.N_SAMPLES
    assert all(fairseq_full.SPEECH_FRAMES[0] <= n <= fairseq_full.SPEECH_FRAMES[1] for n in lengths)
    for name, vocab in (("tokens_mt", fairseq_full.SPECS["mt"].vocab), ("tokens_tts", fairseq_full.SPECS["tts"].vocab)):
        for s in np.load(first[name], allow_pickle=True):
            tokens = s["net_input"]["src_tokens"].view(-1)
            assert int(tokens[-1]) == 2 and 4 <= int(tokens[:-1].min()) and int(tokens.max()) < vocab


def test_repo_configs_match_the_staged_ones(tmp_path, monkeypatch):
    """configs/full/X.yaml with ${S2ST_FULL_DIR} pointing at a staged folder loads to the same stages as the
    folder's own configs/X.yaml (paths resolved both ways)."""
    from pytest_s2st.cases import known_model_types
    from pytest_s2st.config import load_config

    staged = fairseq_full.write_configs(tmp_path)
    monkeypatch.setenv("S2ST_FULL_DIR", str(tmp_path))
    # configs/full/qwen3tts.yaml is Qwen3-TTS's (tests/test_qwen_full.py), not a fairseq model's
    repo = sorted(p for p in (REPO / "configs" / "full").glob("*.yaml") if p.stem != "qwen3tts")
    assert sorted(p.stem for p in repo) == sorted(n for n in staged if n != "3StageS2ST")
    for path in repo:
        ours, theirs = (load_config(p, known_model_types=known_model_types()) for p in (path, staged[path.stem]))
        assert ours.model_type == theirs.model_type
        assert ours.stages == theirs.stages, path.name
        assert ours.general["dataset_path"] == theirs.general["dataset_path"]


def test_qwen_full_missing_is_one_line(tmp_path, monkeypatch, capsys):
    import importlib.util

    if importlib.util.find_spec("qwen_tts") is None:  # found, not imported (importing it prints its own lines)
        pytest.skip("needs the qwen extra")
    monkeypatch.setattr(fairseq_full, "QWEN_MODULE", "pytest_s2st.tiny.no_such_qwen_full")
    assert fairseq_full.stage_qwen_full(tmp_path, 1) is None
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["pytest_s2st.tiny.no_such_qwen_full not in this version: no full-size Qwen3-TTS staged"]


def test_stage_cli_size_choices(capsys):
    from pytest_s2st.cli import stage

    with pytest.raises(SystemExit) as exc:
        stage.main(["out", "--size", "huge"])
    assert exc.value.code == 2
    assert "invalid choice: 'huge'" in capsys.readouterr().err


def test_stage_cli_full_refuses_a_file(tmp_path, capsys):
    from pytest_s2st.cli import stage

    f = tmp_path / "f"
    f.write_text("x")
    assert stage.main([str(f), "--size", "full"]) == 2
    assert capsys.readouterr().err.strip() == f"s2st-stage: error: {f}: exists and is not a directory"

"""Full-size models (issue 17), opt-in: marked `fullsize` by benchmarks/conftest.py, run by `make bench-full` (-m fullsize). Builds the released fairseq
architectures at their released sizes once into the cache (~1 GB, a few minutes), then:

* per model, 1 and 2 threads: runtime per sample, RTF where the output is speech, peak RSS, tensor peak, FLOPs,
  through the runner users run (measure_pipeline, every pass); Qwen3-TTS 12Hz-0.6B CustomVoice too, from
  $QWEN3TTS_FULL_DIR (pytest_s2st.tiny.qwen_full's build; skipped with one line when unset or without the qwen
  extra), on a bounded request ($S2ST_FULL_QWEN_FRAMES codec frames, default 12: 0.96 s of audio);
* what each measuring pass costs against the plain forward at full size: the same interleaved pass set as
  test_measurement_cost.py's tiny benchmark, on the S2T at three sizes (the cost-vs-size curve);
* memory truth at GB scale: peak RSS of loading + one forward in a fresh process against the model bytes and
  activations computed by hand; the tensor peak of a fixed Qwen3-TTS forward (the 12 Hz codec decoder on F
  frames) against its count by hand (pytest_s2st.tiny.qwen_peak), to the byte.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _report(name: str, data) -> None:
    """Print a result and keep it as JSON under $S2ST_FULL_REPORT_DIR (when set) for the docs."""
    print(f"{name}: {json.dumps(data, indent=1)}")
    folder = os.environ.get("S2ST_FULL_REPORT_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{name}.json"), "w") as f:
            json.dump(data, f, indent=1)


def _audio_s(outputs) -> float | None:
    speech = [o for o in outputs if isinstance(o, dict) and "waveform" in o]
    if not speech:
        return None
    return sum(len(o["waveform"]) / o["sample_rate"] for o in speech) / len(speech)


SAMPLES_ENV = "S2ST_FULL_SAMPLES"  # samples per model (default 1: on a shared 2-core machine 3 took too long)
MODELS_ENV = "S2ST_FULL_MODELS"    # comma-separated config names to measure (default: all)
QWEN = "Qwen3TTS"                  # its name in S2ST_FULL_MODELS and in the tables
QWEN_CONFIG = REPO / "configs" / "full" / "qwen3tts.yaml"
QWEN_FRAMES_ENV = "S2ST_FULL_QWEN_FRAMES"  # codec frames per Qwen3-TTS request (max_new_tokens; default 12)
QWEN_TEXT = "The library on the corner stays open late on Thursdays, so I usually finish my reading there."


def _qwen_unavailable() -> str | None:
    """Why the full-size Qwen3-TTS cannot run here (one line), or None."""
    folder = os.environ.get("QWEN3TTS_FULL_DIR")
    if not folder:
        return "QWEN3TTS_FULL_DIR is unset (build it once and print its folder: python -m pytest_s2st.tiny.folder qwen3tts-full)"
    if not (Path(folder) / "config.json").is_file():  # set, but wrong: an error, not a model silently left out
        from pytest_s2st.inputs import show

        pytest.fail(f"QWEN3TTS_FULL_DIR={show(folder)} (environment): no config.json there; "
                    f"python -m pytest_s2st.tiny.folder qwen3tts-full prints the folder of the build", pytrace=False)
    if importlib.util.find_spec("qwen_tts") is None:
        return "qwen-tts is not installed (the qwen extra: pip install -e '.[qwen]')"
    return None


def _qwen_samples(n: int) -> list[dict]:
    return [{"id": f"q{i}", "text": QWEN_TEXT, "language": "en", "voice": "Vivian", "seed": 7 + i} for i in range(n)]


def _qwen_counts(pipeline, outputs, tensor_peak_mib: float) -> dict:
    """The Qwen3-TTS row's extra columns: codec frames generated and the request's tensor peak against the codec
    decode's count by hand plus what generation keeps alive at the decode (pytest_s2st.tiny.qwen_peak)."""
    from pytest_s2st.tiny.qwen_peak import codec_decode_peak, decode_carry_bytes

    inner = pipeline.model.model
    decoder = inner.speech_tokenizer.model.decoder
    frames = max(len(o["waveform"]) // int(decoder.total_upsample) for o in outputs)
    talker = inner.config.talker_config
    size = next(decoder.parameters()).element_size()
    decode = codec_decode_peak(decoder.config, frames, size)["bytes"]
    carry = decode_carry_bytes(talker.hidden_size, talker.num_code_groups, frames, size)
    measured = round(tensor_peak_mib * 2**20)
    return {"frames": frames, "tensor_peak_bytes": measured, "decode_peak_count_bytes": decode,
            "carry_count_bytes": carry, "measured_minus_count_bytes": measured - decode - carry}


@pytest.mark.parametrize("threads", [1, 2])
def test_full_size_models(threads):
    """Every full-size config through measure_pipeline (the memory pass warms up: vmhwm, then the dispatch pass
    for FLOPs + tensor peak, then the timed round) on the first $S2ST_FULL_SAMPLES samples; RTF = runtime per
    sample / seconds of audio it produced. Qwen3-TTS: configs/full/qwen3tts.yaml with max_new_tokens set to
    $S2ST_FULL_QWEN_FRAMES, text samples (one text, seeds 7, 8, ...)."""
    import gc

    from pytest_s2st.cases import known_model_types
    from pytest_s2st.config import load_config
    from pytest_s2st.datasets import load_dataset
    from pytest_s2st.measure.device import resolve_device
    from pytest_s2st.pipelines.base import build_pipeline
    from pytest_s2st.runner import RunSettings, measure_pipeline

    rows = {}
    wanted = os.environ.get(MODELS_ENV)
    wanted = set(wanted.split(",")) if wanted else None
    n = int(os.environ.get(SAMPLES_ENV, "1"))
    configs = {}
    if wanted is None or wanted - {QWEN}:
        pytest.importorskip("fairseq")
        from pytest_s2st.tiny.fairseq_full import default_full_configs

        configs.update(default_full_configs())
    if wanted is None or QWEN in wanted:
        reason = _qwen_unavailable()
        if reason is None:
            configs[QWEN] = QWEN_CONFIG
        elif wanted == {QWEN}:
            pytest.skip(f"{QWEN}: {reason}")
        else:
            print(f"{QWEN}: skipped: {reason}", flush=True)
    for name, path in configs.items():
        if wanted and name not in wanted:
            continue
        config = load_config(path, known_model_types=known_model_types())
        if name == QWEN:
            config.stages[0]["max_new_tokens"] = int(os.environ.get(QWEN_FRAMES_ENV, "12"))
            samples = _qwen_samples(n)
        else:
            samples = load_dataset(config.general["dataset_path"], size=n)
        pipeline = build_pipeline(config.model_type, config.stages, device="cpu", config_path=path)
        settings = RunSettings(device=resolve_device("cpu"), threads=threads, warmup=0)
        m = measure_pipeline(pipeline, samples, settings, case_id=name)
        totals = m.totals
        runtime = totals["runtime_s"].value
        audio = _audio_s(m.outputs)
        print(f"{name} at {threads} thread(s): {runtime:.2f} s per sample", flush=True)
        rows[name] = {
            "runtime_s": round(runtime, 3), "audio_s": audio and round(audio, 3),
            "rtf": audio and round(runtime / audio, 3),
            "peak_rss_mib": totals["peak_rss_mib"].value, "peak_delta_mib": totals["peak_delta_mib"].value,
            "tensor_peak_mib": round(totals["tensor_peak_mib"].value, 1),
            "gflops": round(totals["flops"].value / 1e9, 2), "threads": m.info["threads"],
        }
        if name == QWEN:
            rows[name].update(max_new_tokens=config.stages[0]["max_new_tokens"],
                              **_qwen_counts(pipeline, m.outputs, totals["tensor_peak_mib"].value))
        del pipeline, m
        gc.collect()
        _report(f"full_models_t{threads}", rows)  # after every model: a long run keeps what it measured
        assert runtime > 0 and rows[name]["gflops"] > 0 and rows[name]["tensor_peak_mib"] > 0, name
        assert audio is None or audio > 0.5, (name, audio)  # every speech model spoke (>= 0.5 s of audio)
        if name == QWEN:  # the request's peak is the decode's, over what generation keeps alive (to 64 bytes)
            assert -64 <= rows[name]["measured_minus_count_bytes"] <= 0, rows[name]
    assert rows, f"no full-size model selected by {MODELS_ENV}={os.environ.get(MODELS_ENV)!r}"


@pytest.mark.parametrize("arch", ["tiny", "s2t_transformer_xs", "s2t_transformer_s", "s2t_transformer_m"])
def test_cost_of_measuring_full_size_s2t(arch, timing_target):
    """The measuring passes of test_measurement_cost.py (timed, dispatch FLOPs + tensor peak, the bare decomposing
    floor, vmhwm, memory_profiler; the old FLOPs pass on the tiny model only), interleaved per sample, on the S2T
    at one size: the cost-vs-size curve. Same targets as the tiny run (timing_target)."""
    pytest.importorskip("fairseq")
    from test_measurement_cost import pass_costs

    from pytest_s2st.tiny.fairseq_full import _build_meta, count_parameters, s2t_variant, s2t_variant_config
    from pytest_s2st.tiny.fairseq_tiny import default_configs

    if arch == "tiny":  # the tiny S2T's forward takes ms: 20 samples for the same pass set
        path, n, params = next(c for c in default_configs() if c.stem == "S2T"), 20, None
    else:
        path, n = s2t_variant_config(arch), int(os.environ.get(SAMPLES_ENV, "2"))
        params = count_parameters(_build_meta(s2t_variant(arch)))
    result = pass_costs(path, n, timing_target, old=arch == "tiny")
    timed = result["spent"]["timed"]
    _report(f"cost_{arch}", {
        "params": params, "samples": result["samples"],
        "timed_s_per_sample": round(timed / result["samples"], 3),
        "gflops_per_sample": round(result["flops_per_sample"] / 1e9, 3),
        "x_timed": {k: round(v / timed, 3) for k, v in result["spent"].items()}})


# What the child does: load the S2T the way the runner does (build_pipeline), then one forward; VmRSS before
# anything, after the imports, after loading, and VmHWM after each step (reset between via clear_refs).
_CHILD = textwrap.dedent("""
    import json, sys
    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    def reset():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    import torch, fairseq.checkpoint_utils  # the imports, kept out of the model's memory
    from pytest_s2st.cases import known_model_types
    from pytest_s2st.config import load_config
    from pytest_s2st.datasets import load_dataset
    from pytest_s2st.pipelines.base import build_pipeline
    torch.set_num_threads(1)
    path = sys.argv[1]
    config = load_config(path, known_model_types=known_model_types())
    samples = load_dataset(config.general["dataset_path"], size=1)
    out = {"imports_rss": status("VmRSS"), "imports_file": status("RssFile")}
    reset()
    pipeline = build_pipeline(config.model_type, config.stages, device="cpu", config_path=path)
    stage = pipeline.stages[0]
    x = pipeline.prepare_sample(samples[0])
    out.update(load_hwm=status("VmHWM"), loaded_rss=status("VmRSS"), loaded_file=status("RssFile"))
    reset()
    stage.forward(x)
    out.update(forward_hwm=status("VmHWM"), after_rss=status("VmRSS"), after_file=status("RssFile"),
               frames=int(samples[0]["net_input"]["src_lengths"][0]),
               params=sum(p.numel() for p in stage.model.parameters()) if hasattr(stage, "model") else None)
    print(json.dumps(out))
""")


def test_memory_truth_s2t_load_and_forward():
    """Peak RSS of loading the full-size S2T and of one forward, in a fresh process, against a count by hand.
    Only anonymous memory is compared: RSS also counts the library pages a step maps (torch's kernels, faulted in on
    first use), 16-35 MiB for this forward depending on the kernel's page cache, not on the program.
    Loading holds the checkpoint's tensors (read by torch.load) and the freshly built model at once: its anonymous
    peak over the imports is 2 x the model bytes (within 15 % + 32 MiB); about that much stays resident after it
    (reported; malloc_trim(0) returned none of it when tried, so it is held, not free heap). One forward needs its
    activations: the encoder's (conv subsampler output, one layer's q/k/v, attention scores and FFN hidden at T/4
    frames, every layer's output) and the beam search's (5 hypotheses x 40 steps: incremental self-attention k/v,
    cross-attention k/v, one step's logits), counted below. They go first into the heap the load freed after its
    peak, so the anonymous RSS rises by at most that count, and the rise plus the freed heap is at least half of it."""
    pytest.importorskip("fairseq")
    from pytest_s2st.tiny.fairseq_full import SPECS, default_full_configs

    path = default_full_configs()["S2T"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    mib = 2 ** 20
    params = 29_536_256  # tests/test_fairseq_full.py counts it by hand (s2t_transformer_s, 10k vocabulary)
    model_bytes = 4 * params
    # activations of one forward, fp32, by hand (T input frames -> T/4 after two stride-2 convs)
    t, d, ffn, heads, vocab, beam, steps = m["frames"], 256, 2048, 4, SPECS["s2t"].vocab, 5, 40
    t4 = -(-(-(-t // 2)) // 2)
    conv = t * 1024 + t // 2 * 1024                   # conv1 output (1024 ch) + GLU / conv2 output, per frame
    layer = 3 * t4 * d + heads * t4 * t4 + t4 * ffn   # q/k/v, attention scores, FFN hidden of one layer
    encoder = conv + layer + 12 * t4 * d              # one layer live at a time + every layer's output
    cache = 6 * 2 * beam * steps * d + 6 * 2 * beam * t4 * d  # incremental self-attn k/v + cross-attn k/v
    step = beam * vocab * 3                           # logits, log-probs, scores of one step
    activations = 4 * (encoder + cache + step)
    # RSS counts the file pages mapped too (torch's kernels, faulted in on first use), and how many pages a fault
    # maps depends on the kernel's page cache (identical venvs read 18 and 34-39 MiB for the same forward: the
    # freshly installed one's libraries mapped more). Those pages stay mapped, so the anonymous part of a peak
    # is at least the RSS peak less the file pages mapped during the step, and at most the RSS peak.
    load_file = m["loaded_file"] - m["imports_file"]
    forward_file = m["after_file"] - m["loaded_file"]
    load_peak = m["load_hwm"] - m["imports_rss"] - load_file
    forward_rise = m["forward_hwm"] - m["loaded_rss"] - forward_file
    slack = m["load_hwm"] - m["loaded_rss"]  # heap the process held at the load's peak and freed since
    _report("memory_truth_s2t", {
        "params": params, "model_mib": round(model_bytes / mib, 1), "frames": t,
        "imports_rss_mib": round(m["imports_rss"] / mib, 1),
        "load_peak_over_imports_mib": round((m["load_hwm"] - m["imports_rss"]) / mib, 1),
        "load_file_pages_mapped_mib": round(load_file / mib, 1), "load_peak_anonymous_mib": round(load_peak / mib, 1),
        "expected_load_mib": round(2 * model_bytes / mib, 1),
        "rss_after_load_over_imports_mib": round((m["loaded_rss"] - m["imports_rss"]) / mib, 1),
        "forward_peak_over_loaded_mib": round((m["forward_hwm"] - m["loaded_rss"]) / mib, 1),
        "forward_file_pages_mapped_mib": round(forward_file / mib, 1),
        "forward_peak_anonymous_mib": round(forward_rise / mib, 1),
        "freed_after_load_peak_mib": round(slack / mib, 1),
        "expected_activations_mib": round(activations / mib, 1),
        "peak_over_imports_mib": round((m["forward_hwm"] - m["imports_rss"]) / mib, 1)})
    assert m["params"] in (None, params)
    assert abs(load_peak - 2 * model_bytes) <= 0.15 * 2 * model_bytes + 32 * mib, (load_peak / mib, model_bytes / mib)
    # the forward's activations land first in the heap the load freed (its peak less what stays): the RSS rises
    # by what does not fit there. Anonymous rise <= the activations; rise + freed heap >= half of them
    assert forward_rise <= activations and forward_rise + slack >= 0.5 * activations, \
        (forward_rise / mib, slack / mib, activations / mib)


QWEN_DECODE_FRAMES_ENV = "S2ST_FULL_QWEN_DECODE_FRAMES"  # frames of the fixed decodes (default "11,124")


def test_qwen_decoder_tensor_peak_against_count():
    """The fixed Qwen3-TTS forward of item 5: the full-size 12 Hz codec decoder (float32, as the config loads it) on
    F random codec frames, through the dispatch pass that reports `tensor_peak_mib`, against its count by hand
    from the decoder config (pytest_s2st.tiny.qwen_peak.codec_decode_peak): equal to the byte. F defaults to the
    frames of the bounded row request (11) and of the config's 125-token request (124). Loads the speech
    tokenizer only (651 MB); bytes do not depend on the machine's load."""
    reason = _qwen_unavailable()
    if reason:
        pytest.skip(f"{QWEN}: {reason}")
    import time

    import torch

    from pytest_s2st.measure.tensor_memory import measure_tensor_memory
    from pytest_s2st.tiny.qwen_peak import codec_decode_peak

    with contextlib.redirect_stdout(sys.stderr):  # qwen_tts prints a flash-attn banner on import
        from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    folder = Path(os.environ["QWEN3TTS_FULL_DIR"]) / "speech_tokenizer"
    decoder = Qwen3TTSTokenizerV2Model.from_pretrained(str(folder), dtype=torch.float32).eval().decoder
    cfg = decoder.config
    mib = 2**20
    rows = {}
    for frames in (int(f) for f in os.environ.get(QWEN_DECODE_FRAMES_ENV, "11,124").split(",")):
        codes = torch.randint(0, cfg.codebook_size, (1, cfg.num_quantizers, frames),
                              generator=torch.Generator().manual_seed(0))
        t0 = time.perf_counter()
        with torch.inference_mode():
            wav, metric = measure_tensor_memory(decoder, codes)
        count = codec_decode_peak(cfg, frames)
        rows[str(frames)] = {
            "audio_s": wav.shape[-1] / 24000, "measured_bytes": metric.details["peak_bytes"],
            "count_bytes": count["bytes"], "measured_mib": round(metric.details["peak_bytes"] / mib, 2),
            "count_mib": round(count["bytes"] / mib, 2), "block": count["block"],
            "terms_mib": {k: round(v / mib, 2) for k, v in count["terms"].items()},
            "probed_s": round(time.perf_counter() - t0, 1)}
        print(f"decode of {frames} frames: measured {metric.details['peak_bytes']} B, count {count['bytes']} B",
              flush=True)
    _report("qwen_decode_peak", {"decoder_config": {k: getattr(cfg, k) for k in (
        "latent_dim", "upsampling_ratios", "upsample_rates", "decoder_dim")}, "dtype": "float32", "frames": rows})
    for frames, row in rows.items():
        assert row["measured_bytes"] == row["count_bytes"], (frames, row)


QWEN_PREFILL_POSITIONS_ENV = "S2ST_FULL_QWEN_PREFILL_POSITIONS"  # positions of the fixed prefills (default "20,200")


def test_qwen_talker_prefill_tensor_peak_against_count():
    """The other fixed Qwen3-TTS forward of item 5: the full-size talker's prefill over T positions with a KV cache
    (float32, SDPA, as the config loads it), through the dispatch pass, against its count by hand
    (pytest_s2st.tiny.qwen_peak.talker_prefill_peak): equal to the byte. Loads the talker in float32 (~3.6 GB;
    peak RSS ~5.8 GB while the bfloat16 checkpoint is widened)."""
    reason = _qwen_unavailable()
    if reason:
        pytest.skip(f"{QWEN}: {reason}")
    import time

    import torch

    from pytest_s2st.measure.tensor_memory import measure_tensor_memory
    from pytest_s2st.tiny.qwen_peak import talker_prefill_peak

    with contextlib.redirect_stdout(sys.stderr):  # qwen_tts prints a flash-attn banner on import
        from qwen_tts.core.models import Qwen3TTSForConditionalGeneration

    model = Qwen3TTSForConditionalGeneration.from_pretrained(os.environ["QWEN3TTS_FULL_DIR"], dtype=torch.float32)
    talker = model.eval().talker
    cfg = talker.config
    mib = 2**20
    rows = {}
    for positions in (int(t) for t in os.environ.get(QWEN_PREFILL_POSITIONS_ENV, "20,200").split(",")):
        emb = torch.randn(1, positions, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
        t0 = time.perf_counter()
        with torch.inference_mode():
            _, metric = measure_tensor_memory(talker, inputs_embeds=emb, use_cache=True)
        count = talker_prefill_peak(cfg, positions)
        rows[str(positions)] = {
            "measured_bytes": metric.details["peak_bytes"], "count_bytes": count["bytes"],
            "measured_mib": round(metric.details["peak_bytes"] / mib, 2), "count_mib": round(count["bytes"] / mib, 2),
            "moment": count["moment"], "terms_mib": {k: round(v / mib, 3) for k, v in count["terms"].items()},
            "probed_s": round(time.perf_counter() - t0, 1)}
        print(f"prefill of {positions} positions: measured {metric.details['peak_bytes']} B, count {count['bytes']} B",
              flush=True)
    _report("qwen_prefill_peak", {"talker_config": {k: getattr(cfg, k) for k in (
        "hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim")}, "attention": cfg._attn_implementation, "dtype": "float32",
        "positions": rows})
    for positions, row in rows.items():
        assert row["measured_bytes"] == row["count_bytes"], (positions, row)


VS_ROUNDS_ENV = "S2ST_FULL_VS_ROUNDS"  # alternations of the comparison with upstream (default 1)
VS_DATASET_SIZE = 1  # as upstream's own S2T / 2StageS2ST / 3StageS2ST configs
# upstream's core.py reads these of a FastSpeech2 sample; its npy format has neither (KeyError): both sides read a
# copy of the dataset whose samples carry them as None (what its processTextInput builds for a cascade's TTS)
FASTSPEECH2_SAMPLE_KEYS = {"target_lengths": None, "net_input": {"prev_output_tokens": None}}


def _side(result: dict) -> dict:
    """One config's (or the session's) comparison, rounded for the report."""
    def r(x, n=3):
        return None if x is None else round(x, n)

    out = {"ours_wall_s": r(result["ours_wall_s"]), "upstream_wall_s": r(result["upstream_wall_s"]),
           "ratio": r(result["ratio"]),
           "ours_startup_s": r(result["ours_startup_s"]), "upstream_startup_s": r(result["upstream_startup_s"])}
    for side in ("ours", "upstream"):
        start = result[f"{side}_startup_s"]
        out[f"{side}_measuring_s"] = None if start is None else r(result[f"{side}_wall_s"] - start)
    if out["ours_measuring_s"] is not None and out["upstream_measuring_s"]:
        out["measuring_ratio"] = r(out["ours_measuring_s"] / out["upstream_measuring_s"])
    return out


def test_full_size_vs_upstream(tmp_path):
    """Issue 17 item 4: every full-size config through fairseq's get_metrics.py (one process per config, as upstream
    is used) and through us (one pytest session per config, and one session for all), dataset_size 1, 1 thread,
    our runtime under --s2st-runtime-protocol upstream (upstream's metric). Per round: for each config its upstream
    process and our session next to each other (the order flips every round), then our session over all configs.
    Per config: FLOPs equal on every stage upstream prints (asserted), each side's wall, startup (spawn to the first
    measured forward: interpreter, imports, model loading) and the rest, per-sample runtime of each stage and the
    ratio. $S2ST_FULL_MODELS picks configs, $S2ST_FULL_VS_ROUNDS the alternations."""
    pytest.importorskip("fairseq")
    from pytest_s2st import compare_upstream as cu
    from pytest_s2st.tiny.fairseq_full import default_full_configs

    tests = os.path.join(os.path.dirname(__file__), "test_inference.py")
    wanted = os.environ.get(MODELS_ENV)
    configs = {name: cu.derive_config(path, tmp_path / name, dataset_size=VS_DATASET_SIZE,
                                      sample_keys=FASTSPEECH2_SAMPLE_KEYS if name == "TTS-FastSpeech2" else None)
               for name, path in default_full_configs().items() if not wanted or name in wanted.split(",")}
    if not configs:  # e.g. only the Qwen3-TTS rows asked for: upstream's get_metrics.py runs fairseq configs only
        pytest.skip(f"{MODELS_ENV}={wanted!r} (environment) names no full-size fairseq config")
    rounds = int(os.environ.get(VS_ROUNDS_ENV, "1"))
    threads = 1
    ours = {name: [] for name in configs}
    theirs = {name: [] for name in configs}
    ours_all = []

    def run_ours(paths):
        return cu.run_ours(paths, tests=tests, dataset_size=VS_DATASET_SIZE, threads=threads, protocol="upstream")

    for i in range(rounds):
        for name, path in configs.items():
            pair = [lambda: theirs[name].append(cu.run_upstream([path], threads=threads)),
                    lambda: ours[name].append(run_ours([path]))]
            for step in (pair if i % 2 == 0 else pair[::-1]):
                step()
            print(f"round {i + 1}/{rounds} {name}: upstream {theirs[name][-1].wall_s:.1f} s, "
                  f"ours {ours[name][-1].wall_s:.1f} s", flush=True)
        ours_all.append(run_ours(list(configs.values())))
        print(f"round {i + 1}/{rounds} one session for all: {ours_all[-1].wall_s:.1f} s", flush=True)

    report = {"method": "whole processes, spawn to exit; dataset_size 1, repeat 1, warm-up 2 on sample 0, 1 thread "
                        "on both sides; ours --s2st-runtime-protocol upstream; medians over rounds",
              "rounds": rounds, "load_average": os.getloadavg(), "configs": {}}
    unequal = {}
    for name, path in configs.items():
        result = cu.summarize(ours[name], theirs[name], configs=[path], dataset_size=VS_DATASET_SIZE, threads=threads)
        key = cu.config_key(path)
        flops = result["flops"][key]
        report["configs"][name] = {
            **_side(result), "flops_equal": flops["equal"], "flops": flops["theirs"],
            "runtime_per_sample": {stage: {k: round(v[k], 4) if v[k] is not None else None
                                           for k in ("ours_s", "upstream_s", "ratio")}
                                   for stage, v in result["runtime_per_sample"][key].items()}}
        if not flops["equal"] or not result["samples"]["equal"]:
            unequal[name] = {"flops": flops["differences"], "samples": result["samples"]}
    upstream_sum = [cu.combine([theirs[name][i] for name in configs]) for i in range(rounds)]
    whole = cu.summarize(ours_all, upstream_sum, configs=list(configs.values()), dataset_size=VS_DATASET_SIZE,
                         threads=threads)
    report["one_session_for_all"] = _side(whole)
    report["one_session_for_all"]["flops_equal"] = whole["flops_equal"]
    _report("full_vs_upstream", report)
    assert not unequal, f"FLOPs or samples differ from upstream's: {unequal}"
    assert whole["flops_equal"], {k: v["differences"] for k, v in whole["flops"].items() if not v["equal"]}

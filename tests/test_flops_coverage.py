"""Every aten op the embedded default's models reach, classified: counted by a formula, no arithmetic by
convention (elementwise, reductions, normalisation, softmax, copies, views, indexing, RNG: 0), or uncounted
(matmul-class arithmetic without a formula). An uncounted op fails here: the FLOPs column would be partial."""
from __future__ import annotations

from collections import defaultdict

import pytest

from pytest_s2st.measure.attention_flops import FORMULAS, has_arithmetic


def classify(ops) -> dict[str, str]:
    from torch.utils.flop_counter import flop_registry

    counted = {str(k) for k in flop_registry} | set(FORMULAS)
    return {op: "counted" if op in counted else "uncounted" if has_arithmetic(op) else "no arithmetic (convention)"
            for op in map(str, ops)}


def probed_kernels(forward, x):
    """(result, probe) of forward(x) under the dispatch probe, which also records every op run undecomposed."""
    from pytest_s2st.measure.tensor_memory import _probe_class

    probe = _probe_class()(flops=True, tensors=False)
    probe.kernels = defaultdict(int)
    with probe:
        result = forward(x)
    return result, probe


def fairseq_stages(staged):
    from pytest_s2st.cases import known_model_types
    from pytest_s2st.config import load_config
    from pytest_s2st.datasets import load_dataset
    from pytest_s2st.pipelines.base import build_pipeline
    from pytest_s2st.tiny import fairseq_tiny

    for path in fairseq_tiny.default_configs(staged):
        cfg = load_config(path, known_model_types=known_model_types())
        pipeline = build_pipeline(cfg.model_type, cfg.stages, device="cpu", config_path=path)
        x = pipeline.prepare_sample(load_dataset(cfg.general["dataset_path"], "npy")[0])
        for stage in pipeline.stages:
            yield f"{cfg.case_id}/{stage.name}", stage.forward, x  # probed before the next stage's input is made
            x = stage.to_next_input(stage.forward(x))
        pipeline.close()


def qwen_stage(tmp_path):
    """The embedded default's Qwen3-TTS-tiny, one English sample of 25 codec frames."""
    pytest.importorskip("qwen_tts")
    from pytest_s2st.pipelines.base import build_pipeline, known_model_types  # noqa: F401
    from pytest_s2st.tiny import qwen_tiny

    model_dir = qwen_tiny.tiny_qwen3tts_dir()  # the embedded default's own cache: built once per machine
    pipeline = build_pipeline("Qwen3TTS", [{"model_type": "Qwen3TTS", "path": str(model_dir), "max_new_tokens": 25,
                                            "dtype": "float32"}], device="cpu", config_path=tmp_path / "c.yaml")
    sample = pipeline.prepare_sample({"id": "en", "text": "The library stays open late on Thursdays.",
                                      "language": "en", "voice": "Vivian", "seed": 7})
    return pipeline, pipeline.stages[0].forward, sample


@pytest.mark.usefixtures("one_thread")
def test_every_op_of_the_embedded_default_is_counted_or_has_no_arithmetic(staged, tmp_path):
    reached: dict[str, int] = defaultdict(int)
    where: dict[str, set] = defaultdict(set)
    attention, names = {}, []

    def probe_stage(name, forward, x):
        forward(x)  # warm-up, as the runner does
        _, probe = probed_kernels(forward, x)
        assert not probe.uncounted, (name, dict(probe.uncounted))
        for op, calls in probe.kernels.items():
            reached[str(op)] += calls
            where[str(op)].add(name)
        attention[name] = {str(op): n for op, n in probe.by_op.items() if "attention" in str(op)}
        names.append(name)

    for name, forward, x in fairseq_stages(staged):
        probe_stage(name, forward, x)
    pipeline, forward, x = qwen_stage(tmp_path)
    probe_stage("Qwen3TTS-tiny", forward, x)
    pipeline.close()
    stages = names
    kinds = classify(reached)
    table = "\n".join(f"{kinds[op]:<28}{op:<60}{reached[op]:>8}  {sorted(where[op])[0]}" for op in sorted(reached))
    print(f"\n{len(reached)} ops reached by {len(stages)} stages\n{table}")
    uncounted = {op: sorted(where[op]) for op, kind in kinds.items() if kind == "uncounted"}
    assert not uncounted, uncounted
    assert sum(k == "counted" for k in kinds.values()) >= 3, kinds
    # Qwen3-TTS attends through F.scaled_dot_product_attention: on CPU its flash kernel, now counted (it was 0)
    assert attention["Qwen3TTS-tiny"].get("aten._scaled_dot_product_flash_attention_for_cpu", 0) > 0, attention
    assert len(stages) >= 11, stages

"""The callable demo of the embedded default: a small torch model any machine can run.

A 3-layer MLP over 80-dim frames, fixed seed: the case that needs neither fairseq nor a GPU.
"""
from __future__ import annotations

import os
from pathlib import Path

DEMO_YAML = """\
# Embedded default: a tiny torch MLP benchmarked as model_type callable.
general:
  name: demo
  model_type: callable
  dataset_path: dataset.npy
  dataset_size: 4
  serves_speech: false  # feature frames in, frames out: not a speech service
stage1:
  entry: pytest_s2st.demo:build_mlp
  hidden: 256
"""


def build_mlp(hidden: int = 256, feat_dim: int = 80, seed: int = 1, device: str = "cpu"):
    import torch  # lazy: heavy

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(feat_dim, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, feat_dim),
    ).eval().to(device)

    @torch.inference_mode()
    def forward(sample):
        tokens = torch.as_tensor(sample["net_input"]["src_tokens"], dtype=torch.float32, device=device)
        return model(tokens)

    return forward


def stage_demo(out_dir: Path) -> Path:
    from .dataset_make import generate_random_dataset, save_npy_dataset  # lazy: heavy

    out_dir.mkdir(parents=True, exist_ok=True)
    config, dataset = out_dir / "callable-demo.yaml", out_dir / "dataset.npy"
    if not dataset.exists():
        part = save_npy_dataset(generate_random_dataset(4, feat_dim=80, min_len=50, max_len=120, seed=1),
                                out_dir / f"dataset.{os.getpid()}.part.npy")
        part.replace(dataset)  # a killed run never leaves a half-written dataset under the final name
    if not config.exists() or config.read_text() != DEMO_YAML:  # a cache from an older version is updated
        tmp = config.with_name(config.name + ".tmp")
        tmp.write_text(DEMO_YAML)
        tmp.replace(config)
    return config

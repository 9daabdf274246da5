"""Offline staging of tiny real models (imported lazily: the builders import torch/fairseq)."""

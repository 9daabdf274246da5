"""Pipelines behind one small Protocol, found by model_type through a lazy registry."""
from .base import KNOWN_MODEL_TYPES, Pipeline, Stage, build_pipeline

__all__ = ["KNOWN_MODEL_TYPES", "Pipeline", "Stage", "build_pipeline"]

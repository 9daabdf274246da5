"""pytest-s2st: speech-model benchmarks as pytest tests."""

__version__ = "0.1.0"

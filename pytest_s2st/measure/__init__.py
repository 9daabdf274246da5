"""pytest-free measurement core: runtime, memory, FLOPs, device."""

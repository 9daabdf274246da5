"""Seeds, thread count and runtime facts. torch is touched only when the pipeline already imported it."""
from __future__ import annotations

import os
import random
import sys
from typing import Any

from pytest_s2st.errors import S2STError


def seed_everything(seed: int = 1) -> None:
    """Seed random and numpy; with torch loaded, seed it and ask for deterministic kernels (warn, don't fail)."""
    random.seed(seed)
    try:
        import numpy as np  # lazy: optional
    except ImportError:
        np = None
    if np is not None:
        np.random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is None:
        return
    # cuBLAS needs this before its first use to be deterministic; harmless on cpu.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(seed)  # seeds cpu and every accelerator
    # torch.use_deterministic_algorithms also sets torch._inductor.config.deterministic, importing inductor and
    # dynamo for it (1.2 s here, and a loaded dynamo makes the dispatch pass take torch's slower wrapped path).
    # The same global flag without that import; inductor's own flag only where inductor is already loaded.
    set_flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if set_flag is None:
        torch.use_deterministic_algorithms(True, warn_only=True)
        return
    set_flag(True, warn_only=True)
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        inductor.deterministic = True


def set_threads(n: int) -> int | None:
    """Pin torch's intra-op threads to n when torch is loaded; returns the count torch now uses, else None."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise S2STError(f"--s2st-threads={n}: expected an integer >= 1")
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    torch.set_num_threads(n)
    return torch.get_num_threads()


def runtime_info() -> dict[str, Any]:
    """What the timings depend on, for the saved record: torch threads/version (None without torch), OMP env."""
    torch = sys.modules.get("torch")
    return {
        "threads": torch.get_num_threads() if torch is not None else None,
        "torch": torch.__version__ if torch is not None else None,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }

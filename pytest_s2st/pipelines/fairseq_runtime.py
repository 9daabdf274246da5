"""What loading and running fairseq needs at run time (pytest-free, torch-free at import).

Kept apart from the tiny-model builders (``pytest_s2st.tiny``): the pipelines and the dataset
command use these, and the builders import them from here, never the other way round.
"""
from __future__ import annotations

import contextlib
import warnings
from argparse import Namespace
from typing import Iterator


@contextlib.contextmanager
def quiet_fairseq() -> Iterator[None]:
    """hydra/omegaconf UserWarnings and torch's weight_norm FutureWarning, kept out of -W error runs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def hubert_safe_globals() -> list:
    """hubert_pretraining checkpoints pickle their label Dictionary objects in task_state."""
    from fairseq.data.dictionary import Dictionary  # lazy: heavy

    return [Namespace, Dictionary]

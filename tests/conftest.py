# pytester's in-process runs restore sys.modules afterwards; torch's C extension and the Python
# modules that register operators with it must not be dropped and re-imported between sessions
# (that breaks with "SystemError: bad call flags" or duplicate registrations), so the parts of
# torch the plugin touches are imported once here, before any inner session.
import pytest
import torch
import torch.utils.flop_counter  # noqa: F401

torch.use_deterministic_algorithms(True, warn_only=True)  # imports torch._inductor / _dynamo once
torch.use_deterministic_algorithms(False)
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def staged(tmp_path_factory):
    """The tiny fairseq models, datasets and configs, staged once per test session."""
    from pytest_s2st.tiny import fairseq_tiny

    root = tmp_path_factory.getbasetemp() / "fairseq-stage"
    fairseq_tiny.default_configs(root)
    return root


@pytest.fixture
def one_thread():
    """Tiny-model timings and outputs at one torch thread (modules opt in with usefixtures)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

# pytester's in-process runs restore sys.modules afterwards; torch's C extension and the Python
# modules that register operators with it must not be dropped and re-imported between sessions
# (that breaks with "SystemError: bad call flags" or duplicate registrations), so the parts of
# torch the plugin touches are imported once here, before any inner session.
import torch
import torch.utils.flop_counter  # noqa: F401

torch.use_deterministic_algorithms(True, warn_only=True)  # imports torch._inductor / _dynamo once
torch.use_deterministic_algorithms(False)
torch.set_num_threads(1)

"""One Python dispatch pass over a call: its FLOPs and the peak of its live tensor bytes (torch imported lazily).

``DispatchProbe`` is a single ``TorchDispatchMode`` that does two things per dispatched op:

- **FLOPs**, exactly as ``torch.utils.flop_counter.FlopCounterMode`` counts them, with less per-op work:
  the same registered formulas (``torch.utils.flop_counter.flop_registry``), the same decomposition rule
  (every op that has a CompositeImplicitAutograd kernel is decomposed and its parts are seen; the others run
  and are counted by their overload packet's formula, if any), the same skipped metadata ops. It leaves out
  what a total does not need: the ModuleTracker (a forward pre/post hook on every module call, to attribute
  counts to modules) and the per-module table. tests/test_measure_tensor_memory.py checks equality with
  FlopCounterMode on every model of the embedded default.
- **Live tensor bytes**: every storage an op returns that did not exist when the call began is added to the
  live total, with a weak reference on the storage whose callback subtracts it when the storage dies (CPython frees it
  the moment its last tensor goes). The peak of that total is ``tensor_peak_mib``: bytes of storages created
  during the call and alive at the same time; the same bytes run after run (tests/test_measure_tensor_memory.py).
  Not counted: storages that existed before the call (weights, the input) and views or in-place results of them;
  not seen: a kernel's internal scratch that never leaves it, and tensors made without a dispatched op
  (``torch.tensor(list)``). A storage whose address is reused after it died is a new one (both sets forget
  dead storages).
"""
from __future__ import annotations

import functools
import sys
import weakref
from collections import defaultdict
from typing import Any, Callable

from pytest_s2st.measure.attention_flops import FORMULAS as EXTRA_FORMULAS
from pytest_s2st.measure.attention_flops import NO_ARITHMETIC_NOTE, has_arithmetic
from pytest_s2st.measure.record import Metric

MIB = 2**20
TENSOR_METHOD = "torch_dispatch_storages"
TENSOR_NOTE = ("peak bytes of tensor storages created during the call and alive at once (op outputs, freed when "
               "their last tensor dies); pre-existing storages and kernels' internal scratch are not counted")
METHODS = ("dispatch", "off")
TORCH_METHOD = "torch.utils.flop_counter"  # the FLOPs' method: that module's formulas and rules
TORCH_NOTE = ("analytic count of matmul/conv/attention ops only (2*m*n*k per matmul; causal attention counts the "
              f"full square); {NO_ARITHMETIC_NOTE}; matmul-class ops without a formula are listed under 'uncounted'")

_mode_class: type | None = None
_fast_class: type | None = None


def _probe_class() -> type:
    """The mode class, built on first use so that importing this module imports no torch."""
    global _mode_class, _fast_class
    # lazy: heavy
    import torch.utils.flop_counter  # noqa: F401 -- a sys.modules lookup once imported; raises if torch is gone

    if _mode_class is not None:
        return _mode_class
    import torch  # lazy: heavy

    mode = _dispatch_probe_class(_op_planner(), _flop_counter(torch.Tensor), torch.Tensor)
    _fast_class = _unwrapped(mode)
    _mode_class = mode  # last: set means both are
    return mode


def _op_planner() -> Callable[[Any], tuple]:
    """plan(op) -> (op, skipped, its decomposition, its FLOP formula, whether the formula takes shapes, its packet,
    whether its outputs are fresh, whether it does arithmetic no formula counts): what the probe does with an op,
    worked out once per op."""
    import torch  # lazy: heavy
    from torch._C import DispatchKey  # lazy: heavy
    from torch.utils import flop_counter  # lazy: heavy
    from torch.utils.flop_counter import flop_registry  # lazy: heavy

    aten = torch.ops.aten
    # FlopCounterMode answers NotImplemented for these metadata queries (they only reach a mode for
    # tensor subclasses); so do we.
    skipped = {aten.sym_is_contiguous.default, aten.is_contiguous.default, aten.is_contiguous.memory_format,
               aten.is_strides_like_format.default, aten.is_non_overlapping_and_dense.default, aten.size.default,
               aten.sym_size.default, aten.stride.default, aten.sym_stride.default, aten.storage_offset.default,
               aten.sym_storage_offset.default, aten.numel.default, aten.sym_numel.default, aten.dim.default,
               torch.ops.prim.layout.default}
    never_decompose = torch.ops.prim.device.default
    composite = DispatchKey.CompositeImplicitAutograd
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    shape_wrapper_code = flop_counter.shape_wrapper(lambda: None).__code__

    def _decomposition(func):
        """What OpOverload.decompose would run for func (its Python or C++ composite kernel), or None."""
        if func is never_decompose:
            return None
        if composite in func.py_kernels:
            return func.py_kernels[composite]
        if has_kernel(func.name(), composite):
            return functools.partial(func._op_dk, composite)  # C-level: no Python frame per call
        return None

    def _formula(func):
        """flop_registry's formula for func's packet, else attention_flops' (the kernels torch leaves out); formulas
        behind flop_counter.shape_wrapper are unwrapped and given shapes by _flop_counter (the same values the
        wrapper's tree_map makes, without pytree)."""
        formula = flop_registry.get(func._overloadpacket)
        if formula is None:
            formula = EXTRA_FORMULAS.get(str(func._overloadpacket))
            return None if formula is None else (formula, False)
        if getattr(formula, "__code__", None) is shape_wrapper_code and hasattr(formula, "__wrapped__"):
            return formula.__wrapped__, True
        return formula, False

    def plan(func) -> tuple:
        formula, takes_shapes = _formula(func) or (None, False)
        # no return aliases an input (no "Tensor(a)" in the schema): every output is a storage made by the op
        fresh = all(r.alias_info is None for r in func._schema.returns)
        # matmul-class arithmetic without a formula: named in the metric, never a silent 0
        uncounted = formula is None and has_arithmetic(str(func._overloadpacket))
        return (func, func in skipped, _decomposition(func), formula, takes_shapes, func._overloadpacket, fresh,
                uncounted)

    return plan


def _flop_counter(tensor_type: type) -> Callable[..., int | None]:
    """count(packet, formula, takes_shapes, args, kwargs, out): one run op's FLOPs by its formula, None when the
    call cannot be counted. A shape formula's count is memoized by (packet, argument shapes): it depends on
    shapes only."""
    counts: dict[Any, int] = {}
    max_counts = 100_000  # distinct (op, shapes) kept; past it the memo starts over (a long, shape-varied session)

    def _shape(x):
        # flop_counter.get_shape mapped over a pytree: tensors become their shapes, containers keep their type
        if isinstance(x, tensor_type):
            return x.shape
        if type(x) is list:
            return [_shape(i) for i in x]
        if type(x) is tuple:
            return tuple(_shape(i) for i in x)
        if type(x) is dict:
            return {k: _shape(v) for k, v in x.items()}
        return x

    def count(packet, formula, takes_shapes: bool, args: tuple, kwargs: dict, out) -> int | None:
        if not takes_shapes:
            return formula(*args, **kwargs, out_val=out)
        if any(a.is_nested for a in args if isinstance(a, tensor_type)):
            # a nested (ragged) operand: torch's shape formulas would read its symbolic length as one
            # number; listed uncounted rather than counted wrong (attention_flops' formulas take nesting)
            return None
        shapes = (packet, _shape(args), _shape(out), tuple(_shape(kwargs).items()))
        try:
            return counts[shapes]
        except KeyError:
            if len(counts) >= max_counts:
                counts.clear()
            n = counts[shapes] = formula(*shapes[1], out_shape=shapes[2], **dict(shapes[3]))
            return n
        except TypeError:  # an unhashable argument (a list): no memo
            return formula(*shapes[1], out_shape=shapes[2], **dict(shapes[3]))

    return count


def _storage(t):
    """The tensor's storage, or None for tensors without one (sparse, nested, some subclasses)."""
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _dispatch_probe_class(make_plan: Callable[[Any], tuple], count: Callable[..., int | None],
                          tensor_type: type) -> type:
    """The TorchDispatchMode that routes each op: its plan, then decomposed or run, counted, its outputs tracked."""
    import torch  # lazy: heavy
    from torch.utils._python_dispatch import TorchDispatchMode  # lazy: heavy
    from torch.utils._pytree import tree_leaves  # lazy: heavy

    push, pop = torch._C._push_on_torch_dispatch_stack, torch._C._pop_torch_dispatch_stack
    # id(op) -> make_plan(op). Keyed by id: an OpOverload hashes in Python, thrice per op was measurable.
    plans: dict[int, tuple] = {}

    def _storages_of(args: tuple, kwargs: dict) -> set[int]:
        """Storages of an op's tensor arguments (aten ops take tensors, or lists of them, at the top level)."""
        keys = set()
        for arg in (*args, *kwargs.values()):
            for a in (arg if isinstance(arg, (list, tuple)) else (arg,)):
                if isinstance(a, tensor_type) and (storage := _storage(a)) is not None:
                    keys.add(storage._cdata)
        return keys

    class DispatchProbe(TorchDispatchMode):
        def __init__(self, flops: bool = True, tensors: bool = True):
            super().__init__()
            self.flops, self.tensors = flops, tensors
            self.by_op: dict[Any, int] = defaultdict(int)
            self.uncounted: dict[Any, int] = defaultdict(int)  # op packet -> calls that did arithmetic uncounted
            self.kernels: dict[Any, int] | None = None  # set to a defaultdict(int): op packet -> calls run undecomposed
            self.ops = 0
            self.live = 0
            self.peak = 0
            self.allocations = 0
            self.untracked = 0  # op outputs without a storage (sparse, nested): not in the peak
            self._seen: dict[int, int] = {}  # StorageImpl address -> bytes counted for it
            self._before: set[int] = set()
            self._refs: dict[int, tuple[Any, int]] = {}  # id(weak ref) -> (the ref, StorageImpl address)

        def _track(self, t, args, kwargs, fresh: bool) -> None:
            storage = _storage(t)
            if storage is None:
                self.untracked += 1
                return
            key = storage._cdata
            nbytes = storage.nbytes()
            counted = self._seen.get(key)
            if counted is None:
                if key in self._before:
                    return
                # a view, or an op that hands back its input (in-place ops, lift_fresh): no new storage; it existed
                # before the call, since every storage made during it was seen when its op returned it
                if not fresh and (t._is_view() or key in _storages_of(args, kwargs)):
                    self._mark_before(storage)
                    return
                self._seen[key] = nbytes
                self.allocations += 1
                self._watch(storage, key)
                grown = nbytes
            elif nbytes > counted:  # resized in place (out= ops, resize_)
                self._seen[key] = nbytes
                grown = nbytes - counted
            else:
                return
            self.live += grown
            if self.live > self.peak:
                self.peak = self.live

        def _mark_before(self, storage) -> None:
            # forgotten when it dies, so that a new storage at the same address is counted
            key = storage._cdata
            if key not in self._before:
                self._before.add(key)
                self._watch(storage, key)

        def _watch(self, storage, key: int) -> None:
            # a weak reference with a callback: CPython calls it when the storage dies (cheaper than finalize)
            ref = weakref.ref(storage, self._died)
            self._refs[id(ref)] = (ref, key)

        def _died(self, ref) -> None:
            _, key = self._refs.pop(id(ref), (None, None))
            if key is None:
                return
            nbytes = self._seen.pop(key, None)
            if nbytes is not None:
                self.live -= nbytes
            else:
                self._before.discard(key)

        def _decomposed(self, decompose, args: tuple, kwargs: dict):
            """The op run as its composite kernel's parts (each seen by this mode); NotImplemented when it cannot
            be split."""
            # back on the stack while the parts run, as `with self:` does (its flag bookkeeping is already set
            # by the outer `with probe:`, so the stack push alone is the same)
            push(self)
            try:
                return decompose(*args, **kwargs)
            except RuntimeError:
                # a composite kernel cannot split an op on a jagged nested tensor (ragged sizes): the op
                # runs whole, as the tensor's own dispatch does without this mode (no cost when nothing fails)
                if not any(isinstance(a, tensor_type) and a.is_nested for a in args):
                    raise
                return NotImplemented
            finally:
                pop(None)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            plan = plans.get(id(func))
            if plan is None or plan[0] is not func:
                plan = plans[id(func)] = make_plan(func)
            _, skip, decompose, formula, takes_shapes, packet, fresh, uncounted = plan
            if skip:
                return NotImplemented
            self.ops += 1
            if decompose is not None:
                out = self._decomposed(decompose, args, kwargs)
                if out is not NotImplemented:
                    return out
            out = func(*args, **kwargs)
            if self.kernels is not None:
                self.kernels[packet] += 1
            if formula is not None and self.flops:
                n = count(packet, formula, takes_shapes, args, kwargs, out)
                if n is None:  # this call cannot be counted (a nested operand, an unsupported layout)
                    self.uncounted[packet] += 1
                else:
                    self.by_op[packet] += n
            elif uncounted and self.flops:
                self.uncounted[packet] += 1
            if self.tensors:
                if isinstance(out, tensor_type):
                    self._track(out, args, kwargs, fresh)
                elif isinstance(out, (tuple, list)):
                    for o in out:
                        if isinstance(o, tensor_type):
                            self._track(o, args, kwargs, fresh)
            return out

        def start(self, args: Any) -> None:
            """Storages reachable from the call's arguments existed before it: never counted."""
            if self.tensors:
                for leaf in tree_leaves(args):
                    if isinstance(leaf, tensor_type) and (storage := _storage(leaf)) is not None:
                        self._mark_before(storage)

    return DispatchProbe


def _unwrapped(probe_class: type) -> type:
    """The same mode with the raw handler: TorchDispatchMode wraps __torch_dispatch__ in torch._disable_dynamo (a
    Python wrapper, a lazy import of torch._dynamo and an export check on every op: a third of this pass on beam
    search). The wrapper only matters while dynamo's frame hook can be set, i.e. once torch._dynamo is imported:
    until then the unwrapped handler runs (run_probed picks)."""
    class UnwrappedDispatchProbe(probe_class):
        pass

    raw = probe_class.__dict__["__torch_dispatch__"]
    UnwrappedDispatchProbe.__torch_dispatch__ = getattr(raw, "__wrapped__", raw)  # set after class creation: stays raw
    return UnwrappedDispatchProbe


def new_probe(*, flops: bool = True, tensors: bool = True):
    """A DispatchProbe (not entered): the unwrapped handler while torch._dynamo is not imported."""
    cls = _probe_class()
    if "torch._dynamo" not in sys.modules:
        cls = _fast_class
    return cls(flops=flops, tensors=tensors)


def probe_flops(probe: Any) -> int:
    """The FLOPs a probe counted (torch_flops_metric's value)."""
    return int(sum(probe.by_op.values()))


def run_probed(fn: Callable[..., Any], args: tuple, kwargs: dict, *, flops: bool = True, tensors: bool = True):
    """(result, probe) of one call of fn under a DispatchProbe."""
    probe = new_probe(flops=flops, tensors=tensors)
    probe.start((args, kwargs))
    with probe:
        result = fn(*args, **kwargs)
    return result, probe


def tensor_metric(probe: Any) -> Metric:
    """tensor_peak_mib of one probed call; None with the reason when no torch op ran."""
    if probe.ops == 0:
        return Metric.missing(TENSOR_METHOD, "no torch operation was dispatched; only torch tensors are seen")
    details = {"peak_bytes": probe.peak, "storages": probe.allocations, "note": TENSOR_NOTE}
    if probe.untracked:
        details["untracked_outputs"] = probe.untracked  # sparse / nested outputs have no storage to count
    return Metric(probe.peak / MIB, TENSOR_METHOD, details=details)


def measure_tensor_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Metric]:
    """Run fn once (tensor tracking only); its result and tensor_peak_mib."""
    try:
        _probe_class()
    except Exception as exc:  # torch absent or broken
        return fn(*args, **kwargs), Metric.missing(TENSOR_METHOD,
                                                   f"torch is not importable ({type(exc).__name__}: {exc})")
    result, probe = run_probed(fn, args, kwargs, flops=False, tensors=True)
    return result, tensor_metric(probe)


def torch_flops_metric(probe: Any) -> Metric:
    """The FLOPs of one probed call (FlopCounterMode's formulas and rules); None with the reason when no torch op
    ran."""
    if probe.ops == 0:
        return Metric.missing(
            TORCH_METHOD, "no torch operation was dispatched; the torch counter only sees torch ops"
        )
    by_op = {str(op): int(n) for op, n in probe.by_op.items()}
    details = {"by_op": by_op, "dispatched_ops": probe.ops, "note": TORCH_NOTE,
               "counter": "one dispatch mode with torch.utils.flop_counter's formulas and attention_flops', "
                          "no module tracking"}
    if probe.uncounted:  # a lower bound: say which ops were left out, and how often
        details["uncounted"] = {str(op): int(n) for op, n in sorted(probe.uncounted.items(), key=str)}
        details["partial"] = True
    return Metric(probe_flops(probe), TORCH_METHOD, details=details)


def probe_call(fn: Callable[..., Any], args: tuple, kwargs: dict, *, flops: bool,
               tensors: bool) -> tuple[Any, Metric | None, Metric | None]:
    """One call under one DispatchProbe: (result, flops metric or None, tensor_peak_mib or None).

    The FLOPs metric is what ``count_flops("torch", ...)`` reports (same method name, same count as
    torch.utils.flop_counter.FlopCounterMode); each metric is None when not asked for.
    """
    try:
        _probe_class()
    except Exception as exc:  # torch absent or broken
        reason = f"torch is not importable ({type(exc).__name__}: {exc})"
        return (fn(*args, **kwargs), Metric.missing(TORCH_METHOD, reason) if flops else None,
                Metric.missing(TENSOR_METHOD, reason) if tensors else None)
    result, probe = run_probed(fn, args, kwargs, flops=flops, tensors=tensors)
    return result, torch_flops_metric(probe) if flops else None, tensor_metric(probe) if tensors else None

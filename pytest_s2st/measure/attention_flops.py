"""FLOP formulas for the attention kernels torch's flop registry leaves out, and which ops are left uncounted.

torch.utils.flop_counter counts the CUDA kernels (flash, efficient, cudnn: ``_scaled_dot_product_*_attention``,
``_flash_attention_*``, ``_efficient_attention_*``) but has no formula for what CPU inference reaches:
``F.scaled_dot_product_attention`` on CPU dispatches to ``_scaled_dot_product_flash_attention_for_cpu`` and
``nn.MultiheadAttention`` / ``nn.TransformerEncoderLayer`` in eval to the fused ``_native_multi_head_attention`` /
``_transformer_encoder_layer_fwd``, whose inner matmuls never reach a dispatch mode. Without a formula they
counted 0. The formulas here are keyed by the op's qualified name (no torch import at module import; custom
namespaces such as Ascend's ``npu`` need no torch_npu here) and take the op's real arguments, so nested
(ragged) tensors are counted by their true lengths.

Conventions (torch's, for flash/efficient):
- attention on (B, H, L, E) queries and S keys is 2·B·H·L·S·E (QKᵀ) + 2·B·H·L·S·Ev (AV); softmax, scaling and
  masking count 0 (elementwise);
- **causal counts the full L×S square**, as torch's ``sdpa_flop`` does ("We aren't accounting for causal
  attention"): the number is the dense attention's work, not the kernel's (a causal flash kernel skips about
  half of it);
- GQA (fewer key/value heads than query heads, Qwen3's layout) counts every query head: the kernel broadcasts
  the key/value heads;
- the fused MHA counts its projections as the Linear layers they replace (2·rows·in·out).

An op that does matmul-class arithmetic and has no formula is **uncounted**, never silently 0: the FLOPs
metric names it and its call count and is marked partial (``ARITHMETIC`` below decides by name). Every other op
(elementwise, reductions, normalisation, softmax, copies, views, indexing, RNG) counts 0 by convention.
"""
from __future__ import annotations

import re
from typing import Any, Callable

# The name rule for "does matmul-class arithmetic": contractions, convolutions, attention, RNN cells, linear
# algebra and FFTs. Matched against the op packet's name without its namespace (``aten.bmm`` -> ``bmm``).
ARITHMETIC = re.compile(
    r"attention|(^|_)(mm|bmm|addmm|addbmm|baddbmm|addmv|mv|dot|vdot|addr|ger|outer|matmul|einsum|tensordot|"
    r"bilinear|trilinear|linear|kron|cdist|chain_matmul)($|_)|(^|_)int\d?_?mm|pack_mm|"
    r"(^|_)(cudnn_|mkldnn_|miopen_|slow_|"
    r"thnn_|nnpack_)?conv|convolution|rnn|lstm|gru|^linalg_|^fft_|^_fft_|cholesky|triangular_solve|^_linalg"
)
NO_ARITHMETIC_NOTE = ("elementwise, reductions, normalisation, softmax, copies, views, indexing and RNG count 0 "
                      "by convention")


def has_arithmetic(op_name: str) -> bool:
    """Whether an op (``namespace.name``, overload or not) does matmul-class arithmetic by the name rule."""
    name = op_name.split(".")[1] if "." in op_name else op_name
    return bool(ARITHMETIC.search(name))


def _lengths(t: Any) -> tuple[list[int], int]:
    """(the sequence length of each batch item, the feature size) of a (B, L, E) tensor or a nested one."""
    if getattr(t, "is_nested", False):
        sizes = t._nested_tensor_size().tolist()  # one row (L_i, E) per item
        return [int(s[0]) for s in sizes], int(sizes[0][1]) if sizes else 0
    if t.dim() == 2:  # unbatched (L, E)
        return [int(t.shape[0])], int(t.shape[1])
    b, length, e = (int(v) for v in t.shape)
    return [length] * b, e


def _bhle(t: Any) -> list[tuple[int, int, int, int]]:
    """(B, H, L, E) blocks of an attention operand: one for a dense tensor, one per item for a nested one
    (nested SDPA operands are (B, H, L_i, E) with a ragged L)."""
    if getattr(t, "is_nested", False):
        return [(1, int(s[0]), int(s[1]), int(s[2])) for s in t._nested_tensor_size().tolist()]
    return [tuple(int(v) for v in t.shape)]  # type: ignore[misc]


def attention_flops(q: tuple, k: tuple, v: tuple) -> int:
    """2·B·Hq·L·S·E + 2·B·Hq·L·S·Ev for (B, Hq, L, E) queries, (B, Hkv, S, E) keys, (B, Hkv, S, Ev) values:
    torch's own sdpa_flop_count (GQA included)."""
    from torch.utils.flop_counter import sdpa_flop_count  # lazy: heavy

    return int(sdpa_flop_count(q, k, v))


def sdpa(query, key, value, *args, out_val=None, **kwargs) -> int:
    """The SDPA kernels without a torch formula: the CPU flash variant, the privateuse1 (NPU/XPU) fused one,
    MPS's math one; nested operands counted item by item."""
    return sum(attention_flops(q, k, v) for q, k, v in zip(_bhle(query), _bhle(key), _bhle(value)))


def sdpa_backward(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:
    """Twice the forward's work plus the recomputed scores: torch's sdpa_backward_flop_count (5 matmuls)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count  # lazy: heavy

    return sum(int(sdpa_backward_flop_count(g, q, k, v))
               for g, q, k, v in zip(_bhle(grad_out), _bhle(query), _bhle(key), _bhle(value)))


def _mha(query, key, embed_dim: int, f_in_query: int, f_in_key: int) -> int:
    lq, e = _lengths(query)
    lk, _ = _lengths(key)
    projections = 2 * sum(lq) * e * f_in_query + 2 * sum(lk) * e * f_in_key + 2 * sum(lq) * embed_dim * embed_dim
    scores = sum(4 * a * b * embed_dim for a, b in zip(lq, lk))  # QKᵀ and AV over every head: H·d = embed_dim
    return projections + scores


def native_mha(query, key, value, embed_dim, num_head, qkv_weight, *args, out_val=None, **kwargs) -> int:
    """nn.MultiheadAttention's fast path: q, k, v projections, attention over every head, output projection."""
    e = int(embed_dim)
    return _mha(query, key, e, e, 2 * e)


def transformer_encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
                              norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
                              *args, out_val=None, **kwargs) -> int:
    """nn.TransformerEncoderLayer's fast path: self-attention as above plus the two FFN Linears."""
    e = int(embed_dim)
    rows = sum(_lengths(src)[0])
    ffn = int(ffn_weight_1.shape[0])
    return _mha(src, src, e, e, 2 * e) + 2 * 2 * rows * e * ffn


def npu_fusion_attention(query, key, value, head_num, input_layout, *args, out_val=None, **kwargs) -> int | None:
    """Ascend's torch_npu.npu_fusion_attention in its dense layouts; None (uncounted) for TND, whose lengths
    live in other arguments."""
    layout = str(input_layout)

    def bhle(t, heads=None):
        if layout == "BNSD":
            return tuple(int(v) for v in t.shape)
        if layout == "BSND":
            b, s, n, d = (int(v) for v in t.shape)
            return b, n, s, d
        if layout in ("BSH", "SBH"):
            b, s, hd = (int(v) for v in t.shape) if layout == "BSH" else (
                int(t.shape[1]), int(t.shape[0]), int(t.shape[2]))
            return b, heads, s, hd // heads
        return None

    q = bhle(query, int(head_num))
    if q is None:
        return None
    d = q[3]
    k = bhle(key, max(1, int(key.shape[-1]) // d) if layout in ("BSH", "SBH") else None)
    v = bhle(value, max(1, int(value.shape[-1]) // d) if layout in ("BSH", "SBH") else None)
    return attention_flops(q, k, v)


def trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, *args, out_val=None, **kwargs) -> int | None:
    """aten._trilinear as nn.Bilinear / F.bilinear call it (x1 (N, in1), weight (out, in1, in2), x2 (N, in2),
    expand [1, 3], [0], [1, 2], sum over [2, 3]): ATen computes, per output unit, x1·W_o (N×in1 by in1×in2) then
    a row-wise dot with x2, so 2·N·out·in2·(in1 + 1). Any other pattern: None (listed uncounted)."""
    if [list(expand1), list(expand2), list(expand3), list(sumdim)] != [[1, 3], [0], [1, 2], [2, 3]] \
            or i1.dim() != 2 or i2.dim() != 3 or i3.dim() != 2 \
            or any(getattr(t, "is_nested", False) for t in (i1, i2, i3)):
        return None
    n, in1 = (int(v) for v in i1.shape)
    out, w_in1, in2 = (int(v) for v in i2.shape)
    if w_in1 != in1 or tuple(int(v) for v in i3.shape) != (n, in2):
        return None
    return 2 * n * out * in2 * (in1 + 1)


# op packet name -> formula(*args, **kwargs, out_val=...) -> FLOPs, or None when this call cannot be counted
FORMULAS: dict[str, Callable[..., int | None]] = {
    "aten._scaled_dot_product_flash_attention_for_cpu": sdpa,
    "aten._scaled_dot_product_flash_attention_for_cpu_backward": sdpa_backward,
    "aten._scaled_dot_product_fused_attention_overrideable": sdpa,
    "aten._scaled_dot_product_fused_attention_overrideable_backward": sdpa_backward,
    "aten._scaled_dot_product_attention_math_for_mps": sdpa,
    "aten._native_multi_head_attention": native_mha,
    "aten._transformer_encoder_layer_fwd": transformer_encoder_layer,
    "npu.npu_fusion_attention": npu_fusion_attention,
    "aten._trilinear": trilinear,
}

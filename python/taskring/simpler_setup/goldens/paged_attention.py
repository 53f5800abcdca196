"""Paged-attention decode: inputs and the golden output, as upstream's
``simpler_setup.goldens.paged_attention`` provides them to its tests (torch tensors).

Arguments, in order: ``query`` [batch, num_heads, head_dim], ``key_cache`` and
``value_cache`` [total_blocks, block_size, kv_head_num, head_dim] (``dtype``, default
bfloat16), ``block_table`` [batch, max_model_len // block_size] int32, ``context_lens``
[batch] int32, ``out`` [batch, num_heads, head_dim] float32, and the scalar ``scale``
(``ctypes.c_float(1.0)``).

The golden follows what the kernels compute, block by block with an online softmax:
scores ``q @ k^T * scale`` in f32 with the positions past a request's context masked,
``p = exp(s - max)`` rounded to the input dtype (the PV matmul reads it so, and the row
sums ``l`` add the rounded values), ``o = p @ v``, the running (m, l, o) rescaled by
``exp(m_old - m_new)`` / ``exp(m_block - m_new)``; ``out = o / l``. Only one KV head
(``kv_head_num == 1``). Computed in numpy over f32 copies of the inputs.
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Tuple

import numpy as np


def _round_to(x: np.ndarray, dtype_name: str) -> np.ndarray:
    """``x`` (f32) rounded to ``dtype_name`` and back (nearest, ties to even)."""
    if dtype_name == "bfloat16":
        bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        rounded = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
        return rounded.astype(np.uint32).view(np.float32)
    if dtype_name == "float16":
        return x.astype(np.float16).astype(np.float32)
    return x.astype(np.float32)


def _f32(t: Any) -> np.ndarray:
    if hasattr(t, "detach"):
        t = t.detach().cpu()
        return np.asarray(t.float().numpy() if hasattr(t, "float") else t, dtype=np.float32)
    return np.asarray(t, dtype=np.float32)


def _dtype_name(t: Any) -> str:
    return str(getattr(t, "dtype", "float32")).replace("torch.", "")


def generate_inputs(params: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """Random inputs and a zeroed output for ``params`` (``batch``, ``num_heads``,
    ``kv_head_num``, ``head_dim``, ``block_size``, ``context_len``, ``max_model_len``,
    optional ``dtype`` and ``context_lens_list``: per-request lengths, repeated or cut to
    ``batch``)."""
    import torch

    batch, heads, kv_heads = params["batch"], params["num_heads"], params["kv_head_num"]
    dim, block, max_len = params["head_dim"], params["block_size"], params["max_model_len"]
    dtype = getattr(torch, params.get("dtype", "bfloat16"))
    if params["context_len"] < 1:
        raise ValueError("context_len must be >= 1")
    lens = params.get("context_lens_list")
    if lens is not None:
        lens = list(lens)
        lens = (lens * -(-batch // len(lens)))[:batch]
    else:
        lens = [params["context_len"]] * batch
    context_lens = torch.tensor(lens, dtype=torch.int32)
    blocks_per_req = max_len // block
    total_blocks = max(1, batch * -(-max(lens) // block))
    block_table = torch.randint(0, total_blocks, size=(batch, blocks_per_req), dtype=torch.int32)
    query = torch.empty(batch, heads, dim).uniform_(-0.5, 0.5).to(dtype)
    key_cache = torch.empty(total_blocks, block, kv_heads, dim).uniform_(-0.5, 0.5).to(dtype)
    value_cache = torch.empty(total_blocks, block, kv_heads, dim).uniform_(-1, 1).to(dtype)
    out = torch.zeros(batch, heads, dim, dtype=torch.float32)
    return [
        ("query", query),
        ("key_cache", key_cache),
        ("value_cache", value_cache),
        ("block_table", block_table),
        ("context_lens", context_lens),
        ("out", out),
        ("scale", ctypes.c_float(1.0)),
    ]


def paged_attention(query: Any, key_cache: Any, value_cache: Any, block_table: Any, context_lens: Any, scale: float = 1.0) -> np.ndarray:
    """The golden output [batch, num_heads, head_dim] (f32 numpy) of the decode over
    query [batch, heads, dim], caches [blocks, block_size, 1, dim] (or [blocks,
    block_size, dim]), block_table [batch, n] and context_lens [batch]."""
    p_dtype = _dtype_name(query)
    q = _f32(query)
    batch, heads, dim = q.shape
    k = _f32(key_cache).reshape(-1, _f32(key_cache).shape[1], dim)
    v = _f32(value_cache).reshape(k.shape)
    block = k.shape[1]
    table = np.asarray(_f32(block_table), dtype=np.int64)
    lens = np.asarray(_f32(context_lens), dtype=np.int64)
    out = np.zeros((batch, heads, dim), np.float32)
    for b in range(batch):
        m = l_sum = o = None
        for j in range(-(-int(lens[b]) // block)):
            valid = min(block, int(lens[b]) - j * block)
            kb, vb = k[table[b, j]][:valid], v[table[b, j]][:valid]
            s = (q[b] @ kb.T) * np.float32(scale)
            mj = s.max(axis=1, keepdims=True)
            p = _round_to(np.exp(s - mj), p_dtype)
            lj = p.sum(axis=1, keepdims=True)
            oj = p @ vb
            if m is None:
                m, l_sum, o = mj, lj, oj
            else:
                mn = np.maximum(m, mj)
                a, c = np.exp(m - mn), np.exp(mj - mn)
                l_sum, o, m = a * l_sum + c * lj, a * o + c * oj, mn
        assert o is not None and l_sum is not None
        out[b] = o / l_sum
    return out


def compute_golden(tensors: Dict[str, Any], params: Dict[str, Any]) -> None:
    """Write the golden output into ``tensors["out"]`` (the other entries as
    ``generate_inputs`` made them)."""
    batch, heads, dim = params["batch"], params["num_heads"], params["head_dim"]
    if params["kv_head_num"] != 1:
        raise ValueError("the paged-attention golden supports kv_head_num == 1 only")
    block = params["block_size"]
    query = tensors["query"].reshape(batch, heads, dim)
    table = tensors["block_table"].reshape(batch, params["max_model_len"] // block)
    result = paged_attention(query, tensors["key_cache"], tensors["value_cache"], table, tensors["context_lens"])
    out = tensors["out"]
    if hasattr(out, "copy_"):
        import torch

        out.copy_(torch.from_numpy(result).reshape(out.shape))
    else:
        out[...] = result.reshape(out.shape)

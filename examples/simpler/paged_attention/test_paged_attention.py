#!/usr/bin/env python3
"""Paged-attention decode (Simpler's scene-test form), plain C++ kernels.

Each request's query token attends over its context, whose keys and values sit in
blocks of a shared cache named by the request's row of the block table. Per KV block:
QK matmul (aic), softmax_prepare (aiv), PV matmul (aic), online_update (aiv); the
orchestration gives each request a scope for its running state and each block a nested
scope for its intermediates. The golden is plain numpy attention.
"""

import numpy as np
from simpler.task_interface import ArgDirection as D

from simpler_setup import Scalar, SceneTestCase, TaskArgsBuilder, TensorArg, scene_test

COMMON = ["../common/include"]


def _incore(func_id, name, core_type, signature):
    return {
        "func_id": func_id,
        "source": f"kernels/{core_type}/{name}.cpp",
        "core_type": core_type,
        "signature": signature,
        "extra_include_dirs": COMMON,
    }


@scene_test(level=2, runtime="tensormap_and_ringbuffer")
class TestPagedAttention(SceneTestCase):
    CALLABLE = {
        "orchestration": {
            "source": "kernels/orchestration/paged_attention_orch.cpp",
            "function_name": "aicpu_orchestration_entry",
            "signature": [D.IN, D.IN, D.IN, D.IN, D.IN, D.OUT],
        },
        "incores": [
            _incore(0, "qk_matmul", "aic", [D.IN, D.IN, D.OUT]),
            _incore(1, "softmax_prepare", "aiv", [D.IN, D.OUT, D.OUT, D.OUT]),
            _incore(2, "pv_matmul", "aic", [D.IN, D.IN, D.OUT]),
            _incore(3, "online_update", "aiv", [D.IN, D.IN, D.IN, D.INOUT, D.INOUT, D.INOUT, D.OUT]),
        ],
    }

    RTOL = 1e-4
    ATOL = 1e-5

    CASES = [
        {
            "name": "decode_2x4",
            "platforms": ["a2a3sim", "a2a3"],
            "params": {"heads": 4, "head_dim": 16, "block_size": 16, "num_blocks": 8, "context_lens": [40, 25]},
        },
        {
            # Four requests, one of a single partial block; ring 1 (a request's
            # scope) and ring 2 (a block's) get their own small windows and heaps.
            "name": "decode_4x2_sized",
            "platforms": ["a2a3sim", "a2a3"],
            "params": {"heads": 2, "head_dim": 32, "block_size": 8, "num_blocks": 16, "context_lens": [17, 3, 32, 9]},
            "config": {"runtime_env": {"ring_task_window": [16, 16, 8, 8], "ring_heap": [1 << 16, 1 << 14, 1 << 14, 1 << 12]}},
        },
    ]

    def generate_args(self, params):
        rng = np.random.default_rng(11)
        h, d, bs, nb = params["heads"], params["head_dim"], params["block_size"], params["num_blocks"]
        lens = np.array(params["context_lens"], np.int32)
        batch = len(lens)
        max_blocks = int(-(-lens.max() // bs))
        # Every request gets distinct physical blocks, in a shuffled order.
        table = rng.permutation(nb)[: batch * max_blocks].reshape(batch, max_blocks).astype(np.int32)
        return TaskArgsBuilder(
            TensorArg("query", rng.standard_normal((batch, h, d)).astype(np.float32)),
            TensorArg("key_cache", rng.standard_normal((nb, bs, d)).astype(np.float32)),
            TensorArg("value_cache", rng.standard_normal((nb, bs, d)).astype(np.float32)),
            TensorArg("block_table", table),
            TensorArg("context_lens", lens),
            TensorArg("out", np.zeros((batch, h, d), np.float32)),
            Scalar("scale", float(1.0 / np.sqrt(d))),  # a Python float travels as f32
        )

    def compute_golden(self, args, params):
        for b, ctx in enumerate(args.context_lens):
            k = np.concatenate([args.key_cache[blk] for blk in args.block_table[b]])[:ctx]
            v = np.concatenate([args.value_cache[blk] for blk in args.block_table[b]])[:ctx]
            s = (args.query[b] @ k.T) * np.float32(args.scale)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            args.out[b] = (p / p.sum(axis=1, keepdims=True)) @ v


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)

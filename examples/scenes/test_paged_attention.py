"""Scene test: a paged-attention-like decode on deliberately undersized rings.

The KV cache is a pool of pages; logical block ``b`` of the sequence lives in physical
page ``(b * page_stride) % num_pages`` (a scattered block table given by two SCALAR
arguments, since an orchestration sees tensor handles, not data). Per block, an inner
scope (ring 1) computes the block's scores into a ring-1 temporary and copies them into
the score row; after one softmax (ring 0), a second pass of inner scopes accumulates
P @ V page by page.

The stress cases give ring 1 a 64-slot (or smaller) window and a 1-2 KiB heap: only a
couple of block temporaries fit at a time, so the run completes only if the runtime
rotates the window and reclaims the heap as the scopes retire. ``on_report`` checks the
sizing each case asked for, that the peaks stayed within it, and that ring 1 ran many
more tasks than its window holds (rotation happened).
"""

import numpy as np

import taskring
from taskring import IN, OUT, SCALAR, kernels as K
from taskring.scene_test import SceneTestCase, main, scene_test

HEADS, DIM, BLOCK = 8, 32, 16


@taskring.program(signature=[IN, IN, IN, OUT, SCALAR, SCALAR])
def paged_decode(rt, q, kt_pages, v_pages, out, num_blocks, page_stride):
    num_pages = v_pages.shape[0] // BLOCK
    width = num_blocks * BLOCK
    scores = rt.alloc((HEADS, width), "float32")  # ring 0 heap
    for b in range(num_blocks):
        page = (b * page_stride) % num_pages
        with rt.scope():  # ring 1
            s = rt.submit(K.matmul, inputs=[q, kt_pages[page * DIM:(page + 1) * DIM]],
                          outputs=[rt.spec((HEADS, BLOCK), "float32")]).outputs[0]
            rt.submit(K.copy, inputs=[s], outputs=[scores.view((HEADS, BLOCK), b * BLOCK, (width, 1))])
    p = rt.submit(K.softmax_rows, inputs=[scores], outputs=[rt.spec((HEADS, width), "float32")]).outputs[0]
    rt.submit(K.fill, outputs=[out], scalars=[0.0])
    for b in range(num_blocks):
        page = (b * page_stride) % num_pages
        with rt.scope():  # ring 1
            rt.submit(K.matmul_acc, inputs=[p.view((HEADS, BLOCK), b * BLOCK, (width, 1)),
                                            v_pages[page * BLOCK:(page + 1) * BLOCK]], inouts=[out])


KiB = 1024


@scene_test(level=2)
class TestPagedAttention(SceneTestCase):
    PROGRAM = paged_decode
    RTOL = 1e-4
    ATOL = 1e-5
    CASES = [
        {"name": "defaults", "params": {"num_blocks": 32, "num_pages": 40, "page_stride": 7}},
        {
            # window 64 on every ring, small heaps: ring 0 holds exactly scores + probs
            "name": "window64_small_heaps",
            "params": {"num_blocks": 64, "num_pages": 80, "page_stride": 13},
            "config": {"runtime_env": {"ring_task_window": 64, "ring_heap": [64 * KiB, 2 * KiB, 1 * KiB, 1 * KiB],
                                       "ring_dep_pool": 256}},
            "min_ring1_tasks": 3 * 64,
        },
        {
            # a tighter ring 1: 16 slots, one KiB of heap (two block temporaries)
            "name": "tight_ring1",
            "params": {"num_blocks": 48, "num_pages": 53, "page_stride": 5},
            "config": {"runtime_env": {"ring_task_window": [64, 16, 4, 4], "ring_heap": [0, 1 * KiB, 0, 0],
                                       "ring_dep_pool": [256, 32, 0, 0]}},
            "min_ring1_tasks": 3 * 48,
        },
    ]

    def generate_args(self, params):
        rng = np.random.default_rng(params["num_blocks"])
        pages = params["num_pages"]
        return {
            "q": (rng.standard_normal((HEADS, DIM)) * 0.1).astype(np.float32),
            "kt_pages": (rng.standard_normal((pages * DIM, BLOCK)) * 0.1).astype(np.float32),
            "v_pages": rng.standard_normal((pages * BLOCK, DIM)).astype(np.float32),
            "out": np.zeros((HEADS, DIM), np.float32),
            "num_blocks": params["num_blocks"],
            "page_stride": params["page_stride"],
        }

    def compute_golden(self, args, params):
        nb, pages, stride = params["num_blocks"], params["num_pages"], params["page_stride"]
        table = [(b * stride) % pages for b in range(nb)]
        q = args["q"].astype(np.float64)
        k = np.concatenate([args["kt_pages"][p * DIM:(p + 1) * DIM] for p in table], axis=1).astype(np.float64)
        v = np.concatenate([args["v_pages"][p * BLOCK:(p + 1) * BLOCK] for p in table], axis=0).astype(np.float64)
        s = q @ k
        e = np.exp(s - s.max(axis=1, keepdims=True))
        args["out"][...] = (e / e.sum(axis=1, keepdims=True)) @ v

    def on_report(self, case, report):
        sizing, peak = report.ring_sizing, report.peak
        env = (case.get("config") or {}).get("runtime_env", {})
        for field, got in (("ring_task_window", sizing.task_window), ("ring_heap", sizing.heap), ("ring_dep_pool", sizing.dep_pool)):
            want = env.get(field, 0)
            want = want if isinstance(want, list) else [want] * 4
            for ring in range(4):
                if want[ring]:
                    assert got[ring] == want[ring] and sizing.source(field, ring) == "call_config", (field, ring, sizing)
        for ring in range(4):
            assert peak.task_window[ring] < sizing.task_window[ring], (ring, peak.task_window, sizing.task_window)
            assert peak.heap[ring] <= sizing.heap[ring], (ring, peak.heap, sizing.heap)
            assert peak.dep_pool[ring] <= sizing.dep_pool[ring], (ring, peak.dep_pool, sizing.dep_pool)
        nb = case["params"]["num_blocks"]
        assert report.tasks == 3 * nb + 3, report.tasks  # + the rt.alloc of the score rows
        if "min_ring1_tasks" in case:  # the ring-1 window was reused many times over
            assert 3 * nb >= case["min_ring1_tasks"] > sizing.task_window[1]


if __name__ == "__main__":
    main()

"""The paged-attention decode of examples/scenes/test_paged_attention.py with user-written
C kernels (examples/native/kernels.c, the ABI of include/taskring_kernel.h) instead of
the builtins: same program, same result.

    make -C examples/native && .venv/bin/python examples/native/paged_decode.py

``build()`` compiles the library with the system C compiler when it is missing or older
than its source, so the script also runs on its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

import taskring
from taskring import IN, OUT, SCALAR, kernels as K

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(HERE, "libtrkernels.so")
HEADS, DIM, BLOCK = 8, 32, 16


def build(lib: str = LIB) -> str:
    """Compile kernels.c into ``lib`` (with ``make``'s recipe) unless it is up to date."""
    src = os.path.join(HERE, "kernels.c")
    if not os.path.exists(lib) or os.path.getmtime(lib) < os.path.getmtime(src):
        cc = os.environ.get("CC", "cc")
        inc = os.path.join(HERE, "..", "..", "include")
        subprocess.run([cc, "-O3", "-shared", "-fPIC", "-I", inc, "-o", lib, src, "-lm"], check=True)
    return lib


def native_kernels(lib: str = LIB) -> dict:
    """The decode's kernels from the library, with signatures checked at submit."""
    mat = ["float32[2]"] * 3
    return {
        "matmul": taskring.load_kernel(lib, "tr_matmul", core="aic", tensors=mat, scalars=0),
        "matmul_acc": taskring.load_kernel(lib, "tr_matmul_acc", core="aic", tensors=mat, scalars=0),
        "softmax_rows": taskring.load_kernel(lib, "tr_softmax_rows", tensors=["float32[2]"] * 2, scalars=0),
        "copy": taskring.load_kernel(lib, "tr_copy", tensors=["float32", "float32"], scalars=0),
        "fill": taskring.load_kernel(lib, "tr_fill", tensors=["float32"], scalars=1),
    }


BUILTIN = {"matmul": K.matmul, "matmul_acc": K.matmul_acc, "softmax_rows": K.softmax_rows, "copy": K.copy, "fill": K.fill}


def decode_program(ks: dict) -> taskring.Program:
    """softmax(q K^T) V over a scattered page table, one scope (ring 1) per block."""

    @taskring.program(signature=[IN, IN, IN, OUT, SCALAR, SCALAR], name="paged_decode")
    def paged_decode(rt, q, kt_pages, v_pages, out, num_blocks, page_stride):
        num_pages = v_pages.shape[0] // BLOCK
        width = num_blocks * BLOCK
        scores = rt.alloc((HEADS, width), "float32")
        for b in range(num_blocks):
            page = (b * page_stride) % num_pages
            with rt.scope():
                s = rt.submit(ks["matmul"], inputs=[q, kt_pages[page * DIM:(page + 1) * DIM]],
                              outputs=[rt.spec((HEADS, BLOCK), "float32")]).outputs[0]
                rt.submit(ks["copy"], inputs=[s], outputs=[scores.view((HEADS, BLOCK), b * BLOCK, (width, 1))])
        p = rt.submit(ks["softmax_rows"], inputs=[scores], outputs=[rt.spec((HEADS, width), "float32")]).outputs[0]
        rt.submit(ks["fill"], outputs=[out], scalars=[0.0])
        for b in range(num_blocks):
            page = (b * page_stride) % num_pages
            with rt.scope():
                rt.submit(ks["matmul_acc"], inputs=[p.view((HEADS, BLOCK), b * BLOCK, (width, 1)),
                                                    v_pages[page * BLOCK:(page + 1) * BLOCK]], inouts=[out])

    return paged_decode


def inputs(num_blocks: int = 32, num_pages: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((HEADS, DIM)) * 0.1).astype(np.float32)
    kt = (rng.standard_normal((num_pages * DIM, BLOCK)) * 0.1).astype(np.float32)
    v = rng.standard_normal((num_pages * BLOCK, DIM)).astype(np.float32)
    return q, kt, v


def reference(q, kt, v, num_blocks: int, page_stride: int) -> np.ndarray:
    num_pages = v.shape[0] // BLOCK
    pages = [(b * page_stride) % num_pages for b in range(num_blocks)]
    kt_all = np.concatenate([kt[p * DIM:(p + 1) * DIM] for p in pages], axis=1)
    v_all = np.concatenate([v[p * BLOCK:(p + 1) * BLOCK] for p in pages], axis=0)
    s = q.astype(np.float64) @ kt_all
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return ((e / e.sum(axis=1, keepdims=True)) @ v_all).astype(np.float32)


def main() -> int:
    ks = native_kernels(build())
    nb, stride = 32, 7
    q, kt, v = inputs(nb)
    want = reference(q, kt, v, nb, stride)
    with taskring.ChipWorker() as w:
        for label, kernels in (("native (C)", ks), ("builtin", BUILTIN)):
            out = np.zeros((HEADS, DIM), np.float32)
            prog = decode_program(kernels)
            w.run(prog, q, kt, v, out, nb, stride)  # warm-up
            t0 = time.perf_counter()
            rep = w.run(prog, q, kt, v, out, nb, stride)
            dt = time.perf_counter() - t0
            err = float(np.abs(out - want).max())
            print(f"{label:>10}: {rep.tasks} tasks in {dt * 1e3:.2f} ms, max |error| vs numpy {err:.2e}")
            if err > 1e-4:
                print("MISMATCH", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

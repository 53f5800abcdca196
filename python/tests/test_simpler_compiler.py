"""taskring.simpler_setup's compiling (docs/api.md §13.2): KernelCompiler builds the C++
programs of crates/taskring/tests/pto2 into bytes that run on a chip; the flags of each
build; the compile cache (a second build runs no compiler; an edited header builds anew);
a failed compile's message; the compiler's choice; pto_isa.ensure_pto_isa_root; the
headers shipped with the package. With PTO_ISA_ROOT set, a PTO-ISA kernel over bf16 data
gives the right numbers (and, where the compiler needs taskring's <stdfloat>, the wrong
ones without it)."""

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, SCALAR, _native
from taskring.simpler_setup import KernelCompiler, ensure_pto_isa_root, extract_text_section
from taskring.simpler_setup import compile_cache, kernel_compiler, pto_isa, toolchain

ROOT = Path(__file__).resolve().parents[2]
PTO2 = ROOT / "crates" / "taskring" / "tests" / "pto2"
HERE = Path(__file__).resolve().parent / "simpler_compile"
RUNTIME = "tensormap_and_ringbuffer"
# taskring's ArgDirection numbering, as _native's callables take it.
D_IN, D_OUT, D_INOUT, D_SCALAR = 0, 1, 2, 3


class Counter:
    """Wraps kernel_compiler.run_compiler: the commands of the compiles that ran."""

    def __init__(self, real):
        self.real = real
        self.commands = []

    def __call__(self, cmd):
        self.commands.append(list(cmd))
        return self.real(cmd)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A compile cache of this module's own and a counter of compiler runs."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TASKRING_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    counter = Counter(kernel_compiler.run_compiler)
    mp.setattr(kernel_compiler, "run_compiler", counter)
    yield counter
    mp.undo()


@pytest.fixture
def env(cache, monkeypatch):
    """Per test: the module's cache; no compiler variables from the caller."""
    for var in ("TASKRING_CXX", "CXX"):
        monkeypatch.delenv(var, raising=False)
    return cache


PIPELINE_KERNELS = [  # func_id, source, core type, signature (kernel_ids.h)
    (0, "k_add", "aiv", [D_IN, D_IN, D_OUT]),
    (1, "k_mul", "aic", [D_IN, D_IN, D_OUT]),
    (2, "k_add_scalar", "aiv", [D_INOUT, D_SCALAR]),
]


def build_pipeline(kc):
    """The bytes of o_pipeline and its three kernels."""
    kernels = {
        fid: kc.compile_incore(str(PTO2 / f"{src}.cpp"), core_type=core, extra_include_dirs=[str(PTO2)])
        for fid, src, core, _ in PIPELINE_KERNELS
    }
    orch = kc.compile_orchestration(RUNTIME, str(PTO2 / "o_pipeline.cpp"), extra_include_dirs=[str(PTO2)])
    return orch, kernels


@pytest.fixture(scope="module")
def pipeline(cache):
    with pytest.MonkeyPatch.context() as mp:
        for var in ("TASKRING_CXX", "CXX"):
            mp.delenv(var, raising=False)
        kc = KernelCompiler("a2a3sim")
        first = len(cache.commands)
        orch, kernels = build_pipeline(kc)
        ran = cache.commands[first:]
    return orch, kernels, ran


def pipeline_oracle(a, b, alpha):
    s = a + b
    out = s * a + np.float32(alpha)
    out[1:3, 2:5] += 1
    t_out = (a + s).T.copy()
    misc = np.where(np.arange(a.shape[1]) % 2 == 0, a * a, b + b)
    return out, t_out, misc


def test_the_pipeline_built_from_bytes_runs_on_a_chip(pipeline):
    orch, kernels, _ = pipeline
    children = [(fid, _native.CoreCallable(kernels[fid], core, sig)) for fid, _, core, sig in PIPELINE_KERNELS]
    cc = _native.ChipCallable(orch, "aicpu_orchestration_entry", [D_IN, D_IN, D_OUT, D_OUT, D_OUT, D_SCALAR], children)
    prog = taskring.Program(cc, [IN, IN, OUT, OUT, OUT, SCALAR])
    r, c = 4, 6
    i = np.arange(r * c)
    with taskring.ChipWorker(cores=2) as w:
        for seed in (0, 3):
            a = ((i * 7 + seed) % 11 - 5).astype(np.float32).reshape(r, c)
            b = ((i * 5 + seed) % 13 - 6).astype(np.float32).reshape(r, c)
            out = np.zeros((r, c), np.float32)
            t_out = np.zeros((c, r), np.float32)
            misc = np.zeros(r * c, np.float32)
            alpha = 0.5 + seed
            w.run(prog, a, b, out, t_out, misc, alpha)
            want_out, want_t, want_misc = pipeline_oracle(a, b, alpha)
            np.testing.assert_array_equal(out, want_out)
            np.testing.assert_array_equal(t_out, want_t)
            np.testing.assert_array_equal(misc.reshape(r, c), want_misc)


def test_each_build_has_upstreams_simulator_flags(pipeline):
    _, _, ran = pipeline
    assert len(ran) == 4
    by_source = {Path(cmd[cmd.index("-o") + 2]).stem: cmd for cmd in ran}
    for name, core in (("k_add", "aiv"), ("k_mul", "aic")):
        cmd = by_source[name]
        for flag in ("-shared", "-fPIC", "-O2", "-std=c++23", "-D__CPU_SIM", "-DPTO_CPU_MAX_THREADS=1", "-DNDEBUG"):
            assert flag in cmd, (name, flag)
        assert ("-D__DAV_VEC__" in cmd) == (core == "aiv")
        assert ("-D__DAV_CUBE__" in cmd) == (core == "aic")
        assert ("-fpermissive" in cmd) == ("clang" not in Path(cmd[0]).name)
        incs = [a[2:] for a in cmd if a.startswith("-I")]
        kc = KernelCompiler()
        assert incs == kc.get_incore_include_dirs() + [str(PTO2)]
    orch = by_source["o_pipeline"]
    for flag in ("-shared", "-fPIC", "-O2", "-std=c++17"):
        assert flag in orch
    assert "-std=c++23" not in orch
    assert [a[2:] for a in orch if a.startswith("-I")] == KernelCompiler().get_orchestration_include_dirs(RUNTIME) + [str(PTO2)]


def test_a_second_build_is_a_cache_hit_and_runs_no_compiler(pipeline, env):
    orch, kernels, _ = pipeline
    before = len(env.commands)
    kc = KernelCompiler("a2a3")
    orch2, kernels2 = build_pipeline(kc)
    assert len(env.commands) == before
    assert (kc.compiled, kc.cache_hits) == (0, 4)
    assert orch2 == orch and kernels2 == kernels


def test_an_edited_header_or_other_flags_build_anew(env, tmp_path):
    for f in ("k_add.cpp", "kernel_args.h"):
        shutil.copy(PTO2 / f, tmp_path / f)
    src = str(tmp_path / "k_add.cpp")
    kc = KernelCompiler()
    first = kc.compile_incore(src, extra_include_dirs=[str(tmp_path)])
    assert kc.compile_incore(src, extra_include_dirs=[str(tmp_path)]) == first
    assert (kc.compiled, kc.cache_hits) == (1, 1)
    with open(tmp_path / "kernel_args.h", "a") as f:
        f.write("\n// edited\n")
    kc.compile_incore(src, extra_include_dirs=[str(tmp_path)])
    assert (kc.compiled, kc.cache_hits) == (2, 1)
    kc.compile_incore(src, core_type="aic", extra_include_dirs=[str(tmp_path)])
    assert (kc.compiled, kc.cache_hits) == (3, 1)
    kc.compile_incore(src, core_type="aic", extra_include_dirs=[str(tmp_path)])
    assert (kc.compiled, kc.cache_hits) == (3, 2)


def test_a_failed_compile_names_the_command_and_the_compilers_output(env):
    kc = KernelCompiler()
    src = str(HERE / "broken_kernel.cpp")
    for _ in range(2):  # a failure is not cached
        before = len(env.commands)
        with pytest.raises(RuntimeError) as e:
            kc.compile_incore(src)
        assert len(env.commands) == before + 1
        cmd = env.commands[-1]
        text = str(e.value)
        assert "compilation failed with exit code" in text
        assert f"command: {cmd[0]} " in text and src in text and "-D__DAV_VEC__" in text
        assert "taskring_no_such_function" in text  # the compiler's diagnostic


def test_what_is_refused(env, tmp_path):
    kc = KernelCompiler()
    with pytest.raises(ValueError, match="tensormap_and_ringbuffer"):
        kc.get_orchestration_include_dirs("host_build_graph")
    with pytest.raises(ValueError, match="tensormap_and_ringbuffer"):
        kc.compile_orchestration("host_build_graph", str(PTO2 / "o_pipeline.cpp"))
    with pytest.raises(ValueError, match="Unknown platform: a5sim"):
        KernelCompiler("a5sim")
    with pytest.raises(ValueError, match="core_type"):
        kc.compile_incore(str(PTO2 / "k_add.cpp"), core_type="aicpu")
    with pytest.raises(FileNotFoundError, match="Source file not found"):
        kc.compile_incore(str(tmp_path / "nothing.cpp"))
    with pytest.raises(FileNotFoundError, match="PTO-ISA headers not found"):
        kc.compile_incore(str(PTO2 / "k_add.cpp"), pto_isa_root=str(tmp_path))


def test_include_dirs_hold_taskrings_headers():
    kc = KernelCompiler()
    (orch_dir,) = kc.get_orchestration_include_dirs(RUNTIME)
    assert (Path(orch_dir) / "pto_orchestration_api.h").is_file()
    assert (Path(orch_dir) / "tensor.h").is_file()
    incore = kc.get_incore_include_dirs()
    assert any((Path(d) / "pipe_sync.h").is_file() for d in incore)
    assert orch_dir in incore
    assert taskring.include_dir() == str(Path(orch_dir).parent)


def test_ensure_pto_isa_root_reads_the_environment_and_never_downloads(monkeypatch, tmp_path):
    monkeypatch.delenv("PTO_ISA_ROOT", raising=False)
    with pytest.raises(RuntimeError, match="set PTO_ISA_ROOT"):
        ensure_pto_isa_root()
    assert pto_isa.find_pto_isa_root() is None
    monkeypatch.setenv("PTO_ISA_ROOT", str(tmp_path))
    with pytest.raises(RuntimeError, match="pto-inst.hpp"):
        ensure_pto_isa_root()
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "include" / "pto").mkdir(parents=True)
    (tmp_path / "include" / "pto" / "pto-inst.hpp").write_text("#pragma once\n")
    assert ensure_pto_isa_root() == str(tmp_path.resolve())
    assert pto_isa.find_pto_isa_root() == str(tmp_path.resolve())


def _fake(name, levels, clang=True, stdfloat=False):
    return toolchain.Toolchain(
        argv=(name,), path=f"/usr/bin/{name}", identity=name, version=f"{name} 1.0", is_clang=clang,
        levels=tuple(levels), has_stdfloat=stdfloat, builtins_lib=None,
    )


def test_the_compiler_is_chosen_by_variable_then_by_what_the_source_needs(monkeypatch):
    found = {
        "clang++-19": _fake("clang++-19", ["c++17", "c++23", "pto"]),
        "g++": _fake("g++", ["c++17", "c++23"], clang=False),
        "my-cxx": _fake("my-cxx", ["c++17"]),
    }
    monkeypatch.setattr(toolchain, "probe", lambda argv, origin="": found.get(argv[0]))
    monkeypatch.delenv("TASKRING_CXX", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    assert toolchain.select("pto").argv == ("clang++-19",)
    monkeypatch.setenv("CXX", "g++")
    assert toolchain.select("c++23").argv == ("g++",)
    assert toolchain.select("pto").argv == ("clang++-19",)  # CXX cannot: the next one
    monkeypatch.setenv("TASKRING_CXX", "my-cxx")
    assert toolchain.select("c++17").argv == ("my-cxx",)
    with pytest.raises(RuntimeError, match="TASKRING_CXX=my-cxx .* needs C\\+\\+23"):
        toolchain.select("c++23")  # an explicit choice is not passed over
    monkeypatch.setenv("TASKRING_CXX", "no-such-cxx")
    with pytest.raises(RuntimeError, match="no-such-cxx not found"):
        toolchain.select("c++17")
    monkeypatch.delenv("TASKRING_CXX")
    del found["clang++-19"]
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler found .*tried: CXX=g\\+\\+.*clang\\+\\+-19 \\(not found\\)"):
        toolchain.select("pto")


def test_compiler_variables_may_carry_flags(env, monkeypatch):
    cxx = shutil.which("g++") or shutil.which("clang++-19") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no g++ or clang++ on PATH")
    monkeypatch.setenv("TASKRING_CXX", f"{cxx} -DTASKRING_TEST_FLAG=1")
    KernelCompiler().compile_orchestration(RUNTIME, str(HERE / "one_task_orch.cpp"))
    assert env.commands[-1][:2] == [cxx, "-DTASKRING_TEST_FLAG=1"]


def test_depfile_parsing():
    text = "lib.so: /a/src.cpp /a/x\\ y.h \\\n  /usr/include/stdio.h \\\n /b/c.h\n"
    assert compile_cache.parse_depfile(text) == ["/a/src.cpp", "/a/x y.h", "/usr/include/stdio.h", "/b/c.h"]


def test_a_shared_library_passes_extract_text_section_unchanged(pipeline, tmp_path):
    orch = pipeline[0]
    assert extract_text_section(orch) == orch
    (tmp_path / "o.so").write_bytes(orch)
    assert extract_text_section(str(tmp_path / "o.so")) == orch
    with pytest.raises(ValueError, match="not an ELF"):
        extract_text_section(b"#!/bin/sh\n" * 4)


def test_a_wheel_carries_the_headers_in_the_package(tmp_path):
    spec = importlib.util.spec_from_file_location("taskring_build_headers", ROOT / "build_backend" / "taskring_build.py")
    backend = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(backend)
    except ImportError as e:  # maturin missing
        pytest.skip(f"build backend not importable: {e}")
    (tmp_path / "include" / "pto2").mkdir(parents=True)
    (tmp_path / "include" / "pto2" / "pto_orchestration_api.h").write_text("// api\n")
    (tmp_path / "python" / "taskring").mkdir(parents=True)
    with backend.headers_in_package(str(tmp_path)) as copy:
        assert copy is not None
        assert (Path(copy) / "pto2" / "pto_orchestration_api.h").read_text() == "// api\n"
        # taskring._include finds the copy inside the package first.
        shutil.copy(ROOT / "python" / "taskring" / "_include.py", tmp_path / "python" / "taskring" / "_include.py")
        spec2 = importlib.util.spec_from_file_location("include_under_test", tmp_path / "python" / "taskring" / "_include.py")
        mod = importlib.util.module_from_spec(spec2)
        spec2.loader.exec_module(mod)
        assert mod.include_dir() == str((tmp_path / "python" / "taskring" / "include").resolve())
    assert not (tmp_path / "python" / "taskring" / "include").exists()


# ---------------------------------------------------------------------------------------
# PTO-ISA and bf16 (PTO_ISA_ROOT set only)

def _to_bf16(x):
    """float32 -> bf16 bits, rounded to nearest even."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _run_bf16_kernel(kc, root):
    kernel = kc.compile_incore(str(HERE / "bf16_add_kernel.cpp"), "aiv", root)
    orch = kc.compile_orchestration(RUNTIME, str(HERE / "one_task_orch.cpp"))
    sig = [D_IN, D_IN, D_OUT, D_OUT]
    cc = _native.ChipCallable(orch, "aicpu_orchestration_entry", sig, [(0, _native.CoreCallable(kernel, "aiv", sig))])
    rng = np.random.default_rng(7)
    a = _to_bf16(rng.uniform(-100, 100, (16, 16)))
    b = _to_bf16(rng.uniform(-3, 3, (16, 16)))
    out = np.zeros((16, 16), np.uint16)
    out32 = np.zeros((16, 16), np.float32)
    with taskring.ChipWorker(cores=1) as w:
        # bf16 data travels in 2-byte float16 arrays (numpy has no bfloat16).
        w.run(taskring.Program(cc, [IN, IN, OUT, OUT]), a.view(np.float16), b.view(np.float16), out.view(np.float16), out32)
    want32 = _from_bf16(a) + _from_bf16(b)
    return out, out32, _to_bf16(want32), want32


PTO_ROOT = pto_isa.find_pto_isa_root()
needs_pto = pytest.mark.skipif(
    PTO_ROOT is None, reason="PTO_ISA_ROOT is not set to a pto-isa checkout: the PTO-ISA kernel is not built"
)


@needs_pto
def test_a_pto_isa_kernel_computes_with_real_bf16(env):
    out, out32, want, want32 = _run_bf16_kernel(KernelCompiler(), PTO_ROOT)
    np.testing.assert_array_equal(out32, want32)
    np.testing.assert_array_equal(out, want)


@needs_pto
def test_without_taskrings_stdfloat_bf16_would_be_read_as_fp16(env, monkeypatch):
    tc = toolchain.select("pto")
    if not tc.needs_bf16_shim:
        pytest.skip(f"{tc.describe()} has a real std::bfloat16_t: no trap to show")
    monkeypatch.setattr(KernelCompiler, "_bf16_flags", lambda self, tc, pto: ([], []))
    out, out32, want, want32 = _run_bf16_kernel(KernelCompiler(), PTO_ROOT)
    assert not np.array_equal(out32, want32)
    assert np.max(np.abs(out32 - want32)) > 1.0

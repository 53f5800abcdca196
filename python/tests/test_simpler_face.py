"""taskring.simpler (docs/api.md §13.2): upstream Simpler's task_interface, Worker,
install() and pytest plugin, driven the way upstream's programs drive them — through the
`simpler.*` names — over the C++ programs of crates/taskring/tests/pto2."""

import ctypes
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import taskring
import taskring.simpler
from taskring import RuntimeFailure

taskring.simpler.install()

from simpler.task_interface import (  # noqa: E402
    RUNTIME_ENV_RING_COUNT,
    ArgDirection,
    CallConfig,
    ChipCallable,
    ChipStorageTaskArgs,
    ChipTensor,
    ContinuousTensor,
    CoreCallable,
    DataType,
    RuntimeEnv,
    TaskArgs,
    TensorArgType,
    arg_direction_name,
    get_dtype_name,
    get_element_size,
    scalar_to_uint64,
)
from simpler.worker import Worker  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PTO2 = ROOT / "crates" / "taskring" / "tests" / "pto2"
INCLUDE = ROOT / "include" / "pto2"
VENV_PY = ROOT / ".venv" / "bin" / "python"
PY = str(VENV_PY) if VENV_PY.exists() else sys.executable
D = ArgDirection
K_ADD, K_MUL, K_ADD_SCALAR = 0, 1, 2  # kernel_ids.h

# A probe: the kernel copies x's bytes to y and writes x's DataType and byte count to info.
PROBE_ORCH = r"""
#include "pto_orchestration_api.h"
extern "C" __attribute__((visibility("default"))) void aicpu_orchestration_entry(const ChipTaskArgs &args) {
    CoreTaskArgs t;
    t.add_input(args.tensor(0).ref());
    t.add_output(args.tensor(1).ref());
    t.add_output(args.tensor(2).ref());
    rt_submit_aiv_task(0, t);
}
"""
PROBE_KERNEL = r"""
#include <string.h>
#include "tensor.h"
extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &x = *reinterpret_cast<const ChipTensor *>(args[0]);
    const ChipTensor &y = *reinterpret_cast<const ChipTensor *>(args[1]);
    const ChipTensor &info = *reinterpret_cast<const ChipTensor *>(args[2]);
    memcpy(y.data_as<char>(), x.data_as<char>(), x.nbytes());
    info.data_as<int64_t>()[0] = static_cast<int64_t>(x.dtype);
    info.data_as<int64_t>()[1] = static_cast<int64_t>(x.nbytes());
}
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """The .so bytes of the pto2 test programs and of the probe, built once (g++, in parallel)."""
    cxx = os.environ.get("CXX") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++ or $CXX) to build the test programs")
    d = tmp_path_factory.mktemp("simpler_face")
    (d / "probe_orch.cpp").write_text(PROBE_ORCH)
    (d / "probe_kernel.cpp").write_text(PROBE_KERNEL)
    sources = {n: PTO2 / f"{n}.cpp" for n in ("o_pipeline", "k_add", "k_mul", "k_add_scalar")}
    sources.update(probe_orch=d / "probe_orch.cpp", probe_kernel=d / "probe_kernel.cpp")

    def build(item):
        name, src = item
        out = d / f"lib{name}.so"
        cmd = [cxx, "-std=c++17", "-O0", "-shared", "-fPIC", "-I", str(INCLUDE), "-I", str(PTO2), "-o", str(out), str(src)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
        return name, out.read_bytes()

    with ThreadPoolExecutor(len(sources)) as ex:
        built = dict(ex.map(build, sources.items()))
    built["dir"] = d
    return built


def pipeline(libs):
    """o_pipeline: a, b (in, f32 [R, C]), out (out), t_out (out, [C, R]), misc (out, [R*C]), alpha (f64 scalar)."""
    k = lambda n, core="aiv": CoreCallable.build(signature=[D.IN, D.IN, D.OUT], binary=libs[n], core_type=core)  # noqa: E731
    return ChipCallable.build(
        signature=[D.IN, D.IN, D.OUT, D.OUT, D.OUT],
        func_name="aicpu_orchestration_entry",
        binary=libs["o_pipeline"],
        children=[(K_ADD, k("k_add")), (K_MUL, k("k_mul", "aic")), (K_ADD_SCALAR, k("k_add_scalar"))],
    )


def probe(libs):
    kern = CoreCallable.build(signature=[D.IN, D.OUT, D.OUT], binary=libs["probe_kernel"])
    return ChipCallable.build(signature=[D.IN, D.OUT, D.OUT], func_name="aicpu_orchestration_entry", binary=libs["probe_orch"], children=[(0, kern)])


def alpha_bits(alpha):
    return struct.unpack("<Q", struct.pack("<d", alpha))[0]


def expected_out(a, b, alpha):
    s = a + b
    e = s * a + alpha
    e[1:3, 2:5] += 1
    return e


def pipeline_args(a, b, out, t_out, misc, alpha):
    args = TaskArgs()
    args.add_tensor(a, TensorArgType.INPUT)
    args.add_tensor(b, TensorArgType.INPUT)
    for t in (out, t_out, misc):
        args.add_tensor(t, TensorArgType.OUTPUT_EXISTING)
    args.add_scalar(alpha_bits(alpha))
    return args


def l2(**kw):
    kw.setdefault("platform", "a2a3sim")
    kw.setdefault("runtime", "tensormap_and_ringbuffer")
    return Worker(level=2, **kw)


# ----- the names and their values --------------------------------------------------------


def test_enums_have_upstreams_values_and_names():
    assert [(d.name, d.value) for d in ArgDirection] == [("SCALAR", 0), ("IN", 1), ("OUT", 2), ("INOUT", 3)]
    assert [arg_direction_name(d) for d in ArgDirection] == ["SCALAR", "IN", "OUT", "INOUT"]
    assert [(t.name, t.value) for t in TensorArgType] == [("INPUT", 0), ("OUTPUT", 1), ("INOUT", 2), ("OUTPUT_EXISTING", 3), ("NO_DEP", 4)]
    values = {d.name: d.value for d in DataType}
    assert values == {
        "FLOAT32": 0, "FLOAT16": 1, "INT32": 2, "INT16": 3, "INT8": 4, "UINT8": 5, "BFLOAT16": 6, "INT64": 7,
        "UINT64": 8, "UINT16": 9, "UINT32": 10, "FP8E4M3FN": 12, "FP8E8M0": 13, "FP4E2M1": 14,
    }  # fmt: skip
    sizes = [4, 2, 4, 2, 1, 1, 2, 8, 8, 2, 4, 1, 1, 1]
    assert [get_element_size(d) for d in DataType] == sizes
    assert [get_dtype_name(d) for d in DataType] == list(values)
    assert RUNTIME_ENV_RING_COUNT == 4
    assert ContinuousTensor is ChipTensor


def test_runtime_env_broadcasts_reads_back_lists_and_says_upstreams_errors():
    env = RuntimeEnv()
    assert env.ring_heap == [0, 0, 0, 0]
    env.ring_heap = 1 << 20
    assert env.ring_heap == [1 << 20] * 4
    env.ring_task_window = [128, 64, 32, 16]
    assert env.ring_task_window == [128, 64, 32, 16]
    with pytest.raises(ValueError, match=r"^RuntimeEnv.ring_dep_pool list must contain exactly 4 entries$"):
        env.ring_dep_pool = [1, 2, 3]
    for bad in (None, "64", 1.5, -1, [1, 2, 3, -4]):
        with pytest.raises(ValueError, match=r"^RuntimeEnv.ring_heap must be an int \(broadcast\) or a list of 4 ints$"):
            env.ring_heap = bad
    assert repr(env) == (
        "RuntimeEnv(ring_task_window=[128, 64, 32, 16], ring_heap=[1048576, 1048576, 1048576, 1048576], ring_dep_pool=[0, 0, 0, 0])"
    )


def test_call_config_fields_clamps_reference_and_repr():
    cfg = CallConfig()
    assert repr(cfg) == (
        "CallConfig(aicpu_thread_num=0, enable_chip_swimlane=0, enable_dump_args=0, enable_pmu=0, "
        "enable_dep_gen=False, enable_scope_stats=False)"
    )
    cfg.enable_chip_swimlane = True
    assert cfg.enable_chip_swimlane == 4
    cfg.enable_chip_swimlane = 9
    assert cfg.enable_chip_swimlane == 4
    cfg.enable_dump_args = True
    assert cfg.enable_dump_args == 1
    cfg.enable_dump_args = -3
    assert cfg.enable_dump_args == 0
    cfg.enable_scope_stats = 1
    assert cfg.enable_scope_stats is True
    cfg.runtime_env.ring_heap = 4096  # writes through
    assert cfg.runtime_env.ring_heap == [4096] * 4
    cfg.output_prefix = "/tmp/out"
    assert repr(cfg).endswith(
        "runtime_env.ring_task_window=[0, 0, 0, 0], runtime_env.ring_heap=[4096, 4096, 4096, 4096], "
        "runtime_env.ring_dep_pool=[0, 0, 0, 0], output_prefix='/tmp/out')"
    )
    with pytest.raises(ValueError, match=r"^CallConfig.output_prefix length 1024 exceeds buffer \(1023 bytes\)$"):
        cfg.output_prefix = "x" * 1024


@pytest.mark.parametrize(
    "field, value, msg",
    [
        ("enable_pmu", 2, "CallConfig: output_prefix must be set whenever any of enable_chip_swimlane / enable_dump_args / enable_pmu / enable_dep_gen / enable_scope_stats is enabled"),
        ("ring_task_window", 48, "RuntimeEnv: ring_task_window must be a power of 2 in [4, INT32_MAX]"),
        ("ring_heap", 1023, "RuntimeEnv: ring_heap must be >= 1024 (bytes per ring)"),
        ("ring_dep_pool", 3, "RuntimeEnv: ring_dep_pool must be in [4, INT32_MAX]"),
    ],
)
def test_validate_says_upstreams_texts(field, value, msg):
    cfg = CallConfig()
    setattr(cfg.runtime_env if field.startswith("ring") else cfg, field, value)
    with pytest.raises(ValueError) as e:
        cfg.validate()
    assert str(e.value) == msg


def test_callables_build_from_bytes_and_describe_themselves():
    core = CoreCallable.build(signature=[D.IN, D.OUT, D.SCALAR], binary=b"\x01\x02\x03\x04")
    assert (core.sig_count, core.binary_size, core.sig(2), core.core_type) == (3, 4, D.SCALAR, "aiv")
    assert repr(core) == "CoreCallable(sig_count=3, binary_size=4)"
    with pytest.raises(IndexError):
        core.sig(3)
    cc = ChipCallable.build(signature=[D.IN, D.OUT], func_name="f", binary=b"\xaa" * 16, children=[(10, core), (20, core)])
    assert (cc.sig_count, cc.binary_size, cc.child_count, cc.child_func_id(1), cc.func_name) == (2, 16, 2, 20, "f")
    assert cc.child(0) is core and all(cc.child_offset(i) % 64 == 0 for i in range(2))
    assert cc.buffer_ptr() != 0 and cc.buffer_size() > 16
    assert repr(cc) == 'ChipCallable(func_name="f", config_name="", sig_count=2, binary_size=16, child_count=2)'
    with pytest.raises(ValueError, match=r"requested tensor count 257.*supported tensor count 256"):
        ChipCallable.build(signature=[D.IN] * 257, func_name="f", binary=b"", children=[])
    with pytest.raises(ValueError, match="core_type must be 'aic' or 'aiv'"):
        CoreCallable.build(signature=[], binary=b"", core_type="cube")


def test_task_args_tags_order_and_errors():
    a = np.zeros(4, np.float32)
    args = TaskArgs()
    args.add_tensor(a)
    args.add_tensor(a, TensorArgType.OUTPUT_EXISTING)
    assert args.tag(0) == TensorArgType.INPUT and args.tag(1) == TensorArgType.OUTPUT_EXISTING
    args.set_tag(0, TensorArgType.INOUT)
    assert args.tag(0) == TensorArgType.INOUT
    args.add_scalar(2**64 - 1)
    args.add_scalar(-1)  # the same 64 bits
    assert (args.tensor_count(), args.scalar_count(), len(args)) == (2, 2, 4)
    assert args.scalar(0) == args.scalar(1) == 2**64 - 1
    assert args.tensor(1).shapes == (4,) and args.tensor(1).dtype == DataType.FLOAT32
    with pytest.raises(RuntimeError, match="TaskArgs: cannot add tensor after scalar"):
        args.add_tensor(a)
    for call in (lambda: args.tensor(2), lambda: args.scalar(5), lambda: args.tag(-1), lambda: args.set_tag(9, 0)):
        with pytest.raises(IndexError):
            call()
    args.clear()
    assert len(args) == 0
    for i in range(200):  # no capacity limit
        args.add_scalar(i)
    assert args.scalar_count() == 200


def test_scalar_to_uint64_and_chip_tensors():
    assert scalar_to_uint64(999) == 999
    assert scalar_to_uint64(-1) == 2**64 - 1
    assert scalar_to_uint64(1.5) == struct.unpack("<I", struct.pack("<f", 1.5))[0]
    assert scalar_to_uint64(ctypes.c_double(1.5)) == struct.unpack("<Q", struct.pack("<d", 1.5))[0]
    assert scalar_to_uint64(ctypes.c_int64(42)) == 42
    x = np.arange(6, dtype=np.int32)
    t = ChipTensor.make(x.ctypes.data, (2, 3), DataType.INT32)
    assert (t.ndims, t.nbytes(), t.strides, t.child_memory) == (2, 24, (3, 1), False)
    assert repr(t) == f"ChipTensor(data=0x{x.ctypes.data:x}, shapes=(2, 3), dtype=INT32)"
    assert (t.numpy() == x.reshape(2, 3)).all()
    with pytest.raises(ValueError):
        ChipTensor.make(0, (1, 2, 3, 4, 5, 6), DataType.INT32)
    s = ChipStorageTaskArgs()
    s.add_tensor(t)
    s.add_scalar(7)
    assert (len(s), s.tensor(0) is t, s.scalar(0)) == (2, True, 7)


# ----- install() and the plugin ----------------------------------------------------------


def test_install_binds_upstreams_names_to_taskrings_modules():
    import _task_interface
    import simpler
    import simpler.callable_identity
    import simpler_setup
    import simpler_setup.torch_interop

    assert simpler is taskring.simpler and simpler.Worker is Worker
    assert _task_interface is sys.modules["taskring.simpler.task_interface"]
    assert simpler_setup is sys.modules["taskring.simpler_setup"]
    assert simpler_setup.torch_interop is sys.modules["taskring.simpler_setup.torch_interop"]
    taskring.simpler.install()  # again: nothing changes
    assert sys.modules["simpler.worker"] is sys.modules["taskring.simpler.worker"]


def test_install_refuses_a_simpler_imported_from_elsewhere(tmp_path):
    (tmp_path / "simpler").mkdir()
    (tmp_path / "simpler" / "__init__.py").write_text("")
    code = "import simpler, taskring.simpler\ntry:\n    taskring.simpler.install()\nexcept RuntimeError as e:\n    print(e)\n"
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "the module 'simpler' is already imported from" in r.stdout and str(tmp_path) in r.stdout


UPSTREAM_STYLE_TEST = '''
import numpy as np
import pytest
from simpler.task_interface import ArgDirection as D, CallConfig, ChipCallable, CoreCallable, TaskArgs, TensorArgType
from simpler.worker import Worker

LIBS = {LIBS!r}


def _read(name):
    with open(f"{{LIBS}}/lib{{name}}.so", "rb") as f:
        return f.read()


@pytest.mark.platforms(["a2a3sim", "a2a3"])
@pytest.mark.runtime("tensormap_and_ringbuffer")
@pytest.mark.device_count(2)
def test_probe(st_platform, st_device_ids):
    kern = CoreCallable.build(signature=[D.IN, D.OUT, D.OUT], binary=_read("probe_kernel"))
    cc = ChipCallable.build(signature=[D.IN, D.OUT, D.OUT], func_name="aicpu_orchestration_entry",
                            binary=_read("probe_orch"), children=[(0, kern)])
    w = Worker(level=2, platform=st_platform, runtime="tensormap_and_ringbuffer", device_id=int(st_device_ids[1]))
    h = w.register(cc)
    w.init()
    try:
        x = np.arange(8, dtype=np.float32)
        y = np.zeros(8, np.float32)
        info = np.zeros(2, np.int64)
        args = TaskArgs()
        args.add_tensor(x, TensorArgType.INPUT)
        args.add_tensor(y, TensorArgType.OUTPUT_EXISTING)
        args.add_tensor(info, TensorArgType.OUTPUT_EXISTING)
        w.run(h, args, CallConfig())
        assert (y == x).all() and list(info) == [0, 32]
        print("DEVICES", st_device_ids)
    finally:
        w.close()


@pytest.mark.platforms(["a5sim"])
def test_other_platform():
    raise AssertionError("not collected for a2a3sim")


@pytest.mark.runtime("host_build_graph")
def test_other_runtime():
    raise AssertionError("taskring runs tensormap_and_ringbuffer")


@pytest.mark.manual
def test_manual():
    raise AssertionError("manual tests are excluded by default")
'''


def run_plugin(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTO2_RING_")}
    return subprocess.run(
        [PY, "-m", "pytest", "-p", "taskring.simpler.pytest_plugin", "-q", "-rs", "-s", "-p", "no:cacheprovider", *args],
        capture_output=True, text=True, cwd=tmp_path, timeout=240, env=env,
    )  # fmt: skip


def test_an_upstream_style_test_file_runs_unmodified_under_the_plugin(libs, tmp_path):
    (tmp_path / "test_upstream_style.py").write_text(UPSTREAM_STYLE_TEST.format(LIBS=str(libs["dir"])))
    r = run_plugin(tmp_path, "test_upstream_style.py", "--platform", "a2a3sim", "--device", "4-7")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed, 3 skipped" in r.stdout
    assert "DEVICES [4, 5]" in r.stdout
    assert "not for platform a2a3sim" in r.stdout
    assert "runtime 'host_build_graph': taskring runs 'tensormap_and_ringbuffer' only" in r.stdout
    assert "manual test (run with --manual include)" in r.stdout
    # Without --platform, st_platform skips as upstream's does; --platform a5sim is refused.
    r = run_plugin(tmp_path, "test_upstream_style.py", "-k", "probe")
    assert "--platform required for ST tests" in r.stdout, r.stdout
    r = run_plugin(tmp_path, "test_upstream_style.py", "--platform", "a5sim")
    assert r.returncode != 0 and "--platform 'a5sim' is not supported" in r.stderr


# ----- Worker: the lifecycle and its errors ----------------------------------------------


def test_worker_refuses_what_taskring_does_not_run():
    with pytest.raises(ValueError, match="runtime 'host_build_graph' is not supported; taskring runs 'tensormap_and_ringbuffer'"):
        l2(runtime="host_build_graph")
    with pytest.raises(ValueError, match="platform 'a5sim' is not supported"):
        l2(platform="a5sim")
    with pytest.raises(ValueError, match="Worker: level 5 not supported"):
        Worker(level=5, platform="a2a3sim")
    with pytest.raises(KeyError):
        Worker(level=2, runtime="tensormap_and_ringbuffer")


def test_a2a3_warns_once_per_process():
    code = (
        "import warnings; warnings.simplefilter('always')\n"
        "from taskring.simpler.worker import Worker\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    Worker(level=2, platform='a2a3', runtime='tensormap_and_ringbuffer')\n"
        "    Worker(level=2, platform='a2a3', runtime='tensormap_and_ringbuffer')\n"
        "print(len(w), w[0].message)\n"
    )
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1 platform 'a2a3' runs on taskring's simulated a2a3 chip: no Ascend device is used"


def test_lifecycle_errors(libs):
    w = l2()
    with pytest.raises(TypeError, match="Worker.register: level 2 only supports ChipCallable targets"):
        w.register(lambda *a: None)
    h = w.register(pipeline(libs))
    assert h.hashid.startswith("sha256:") and len(h.hashid) == 71 and h.kind == "CHIP_CALLABLE"
    assert w.register(pipeline(libs)).hashid == h.hashid  # the same content, the same identity
    with pytest.raises(RuntimeError, match="Worker.init\\(\\) has not been called"):
        w.run(h, TaskArgs())
    bad = ChipCallable.build(signature=[], func_name="aicpu_orchestration_entry", binary=b"not a library", children=[])
    with pytest.raises(Exception, match="ELF|library"):
        w.register(bad)
    with w:
        w.init()
        with pytest.raises(RuntimeError, match="Worker already initialized"):
            w.init()
        with pytest.raises(TypeError, match="CallableHandle"):
            w.run(pipeline(libs), TaskArgs())
        with pytest.raises(TypeError, match="worker.malloc is L2-only"):
            Worker(level=3, platform="a2a3sim", device_ids=[0]).malloc(8)
    with pytest.raises(RuntimeError, match="Worker is closed; create a new Worker"):
        w.run(h, TaskArgs())


# ----- level 2 ---------------------------------------------------------------------------


def test_l2_runs_a_cpp_program_on_numpy_arrays_in_place(libs):
    R, C = 4, 6
    a = np.arange(R * C, dtype=np.float32).reshape(R, C)
    b = np.full((R, C), 2.0, np.float32)
    out, t_out, misc = np.zeros((R, C), np.float32), np.zeros((C, R), np.float32), np.zeros(R * C, np.float32)
    with l2(device_id=3) as w:
        h = w.register(pipeline(libs))
        w.init()
        assert w.run(h, pipeline_args(a, b, out, t_out, misc, 0.5), CallConfig()) is None  # as upstream
        rep = w.last_report  # taskring's report of the run
        assert rep.tasks == 7
        np.testing.assert_allclose(out, expected_out(a, b, 0.5))
        np.testing.assert_allclose(t_out, (a + a + b).T)
        # A per-call runtime_env sizes that call's rings (a heap that is not a power of 2
        # runs with the next one up).
        cfg = CallConfig()
        cfg.runtime_env.ring_task_window = 16
        cfg.runtime_env.ring_heap = 1536 * 1024
        cfg.runtime_env.ring_dep_pool = [64, 32, 16, 16]
        out[...] = 0
        w.run(h, pipeline_args(a, b, out, t_out, misc, -1.0), cfg)
        rep = w.last_report
        assert rep.ring_sizing.task_window == (16, 16, 16, 16)
        assert rep.ring_sizing.heap == (2 << 20,) * 4
        assert rep.ring_sizing.dep_pool == (64, 32, 16, 16)
        np.testing.assert_allclose(out, expected_out(a, b, -1.0))
        # Upstream's rules are checked before the call.
        cfg.runtime_env.ring_task_window = 48
        with pytest.raises(ValueError, match="ring_task_window must be a power of 2"):
            w.run(h, pipeline_args(a, b, out, t_out, misc, 0.0), cfg)


def test_l2_malloc_copy_and_buffer_tensors(libs):
    R, C = 4, 6
    n = R * C * 4
    a = np.linspace(0, 1, R * C, dtype=np.float32).reshape(R, C)
    b = np.ones((R, C), np.float32)
    with l2() as w:
        h = w.register(pipeline(libs))
        w.init()
        free0, total = w.device_memory_info()
        used0 = w.committed_device_memory()
        assert used0 + free0 == total
        bufs = [w.malloc(n) for _ in range(5)]
        assert len({x.base for x in bufs}) == 5 and all(x.base % 64 == 0 for x in bufs)
        assert w.committed_device_memory() == used0 + 5 * n
        assert w.device_memory_info() == (free0 - 5 * n, total)
        w.copy_to(bufs[0], a)
        w.copy_to(bufs[1], b)
        args = TaskArgs()
        args.add_tensor(bufs[0].tensor(shapes=(R, C), dtype=DataType.FLOAT32), TensorArgType.INPUT)
        args.add_tensor(bufs[1].tensor(shapes=(R, C), dtype=DataType.FLOAT32), TensorArgType.INPUT)
        args.add_tensor(bufs[2].tensor(shapes=(R, C), dtype=DataType.FLOAT32), TensorArgType.OUTPUT_EXISTING)
        args.add_tensor(bufs[3].tensor(shapes=(C, R), dtype=DataType.FLOAT32), TensorArgType.OUTPUT_EXISTING)
        args.add_tensor(bufs[4].tensor(shapes=(R * C,), dtype=DataType.FLOAT32), TensorArgType.OUTPUT_EXISTING)
        args.add_scalar(alpha_bits(2.0))
        w.run(h, args, CallConfig())
        out = np.zeros((R, C), np.float32)
        w.copy_from(out, bufs[2])
        np.testing.assert_allclose(out, expected_out(a, b, 2.0), rtol=1e-6)
        # Raw bytes both ways through ctypes buffers, as upstream's worker_malloc example does.
        src = (ctypes.c_uint8 * 96).from_buffer_copy(bytes(range(96)))
        dst = (ctypes.c_uint8 * 96)()
        w.copy_to(bufs[3], src)
        w.copy_from(dst, bufs[3])
        assert bytes(dst) == bytes(range(96))
        with pytest.raises(ValueError, match="exceeds the 96-byte backing"):
            w.copy_to(bufs[0], np.zeros(25, np.float32))
        for x in bufs:
            w.free(x)
        assert w.committed_device_memory() == used0
        with pytest.raises(ValueError, match="not a live buffer"):
            w.free(bufs[0])
        with pytest.raises(ValueError, match="released buffer"):
            bufs[0].tensor(shapes=(1,), dtype=DataType.FLOAT32)


def test_l2_malloc_beyond_the_device_memory_is_device_out_of_memory():
    pre = CallConfig()
    pre.runtime_env.ring_task_window = 16
    pre.runtime_env.ring_heap = 64 * 1024
    pre.runtime_env.ring_dep_pool = 16
    with l2(device_memory=64 << 20) as w:
        w.init(prewarm_config=pre)
        free, total = w.device_memory_info()
        assert total == 64 << 20 and 0 < free < total  # the prewarmed arena is charged
        with pytest.raises(RuntimeFailure) as e:
            w.malloc(total + 1)
        assert e.value.code == 202 and e.value.name == "DEVICE_OUT_OF_MEMORY"
        assert w.device_memory_info() == (free, total)  # nothing charged
        # More than is free, less than the whole: the idle prewarmed arena makes room.
        buf = w.malloc(free + 1)
        assert w.device_memory_info() == (total - free - 1, total)
        w.free(buf)
        assert w.device_memory_info() == (total, total)


class ArrayInterfaceOnly:
    """Exposes memory through __array_interface__ only."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


class DLPackOnly:
    """Exposes memory through __dlpack__ only."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


DTYPES = [np.float32, np.float16, np.int32, np.int64, np.int8, np.uint8]


@pytest.mark.parametrize("wrap", [np.asarray, ArrayInterfaceOnly, DLPackOnly], ids=["numpy", "array_interface", "dlpack"])
def test_tensors_of_every_dtype_reach_the_kernel_in_place(libs, wrap):
    with l2() as w:
        h = w.register(probe(libs))
        w.init()
        for dt in DTYPES:
            x = (np.arange(12) % 100).astype(dt).reshape(3, 4)
            y = np.zeros_like(x)
            info = np.zeros(2, np.int64)
            args = TaskArgs()
            args.add_tensor(wrap(x), TensorArgType.INPUT)
            args.add_tensor(wrap(y), TensorArgType.OUTPUT_EXISTING)
            args.add_tensor(info, TensorArgType.OUTPUT_EXISTING)
            w.run(h, args)
            assert (y == x).all(), dt  # the kernel wrote the caller's own memory
            kind = {np.float32: DataType.FLOAT32, np.float16: DataType.FLOAT16, np.int32: DataType.INT32,
                    np.int64: DataType.INT64, np.int8: DataType.INT8, np.uint8: DataType.UINT8}[dt]  # fmt: skip
            assert list(info) == [int(kind), x.nbytes]
        args = TaskArgs()
        args.add_tensor(np.zeros(4, np.int16))
        args.add_tensor(np.zeros(4, np.int16))
        args.add_tensor(np.zeros(2, np.int64))
        with pytest.raises(TypeError, match="dtype int16 is not supported"):
            w.run(h, args)


def test_bfloat16_tensors_reach_the_kernel(libs):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 numpy arrays need the ml_dtypes package")
    x = np.array([1.5, -2.0, 3.25, 0.0], dtype=ml_dtypes.bfloat16)
    y = np.zeros_like(x)
    info = np.zeros(2, np.int64)
    with l2() as w:
        h = w.register(probe(libs))
        w.init()
        args = TaskArgs()
        for t, tag in ((x, TensorArgType.INPUT), (y, TensorArgType.OUTPUT_EXISTING), (info, TensorArgType.OUTPUT_EXISTING)):
            args.add_tensor(t, tag)
        assert args.tensor(0).dtype == DataType.BFLOAT16
        w.run(h, args)
    assert (y == x).all() and list(info) == [int(DataType.BFLOAT16), 8]


def test_torch_tensors_at_l2_and_l3(libs):
    torch = pytest.importorskip("torch", reason="torch is not installed (numpy, __array_interface__ and __dlpack__ are tested)")
    from simpler_setup.torch_interop import make_tensor_arg, torch_dtype_to_datatype

    assert torch_dtype_to_datatype(torch.bfloat16) == DataType.BFLOAT16
    x = torch.arange(8, dtype=torch.float32)
    y = torch.zeros(8, dtype=torch.float32)
    info = torch.zeros(2, dtype=torch.int64)
    with l2() as w:
        h = w.register(probe(libs))
        w.init()
        args = TaskArgs()
        for t, tag in ((x, TensorArgType.INPUT), (y, TensorArgType.OUTPUT_EXISTING), (info, TensorArgType.OUTPUT_EXISTING)):
            args.add_tensor(make_tensor_arg(w, t), tag)
        w.run(h, args)
    assert torch.equal(x, y) and info.tolist() == [0, 32]
    # L3: share_memory_() tensors made before init(), written by a chip process.
    x = torch.arange(8, dtype=torch.float32).share_memory_()
    y = torch.zeros(8, dtype=torch.float32).share_memory_()
    info = torch.zeros(2, dtype=torch.int64).share_memory_()
    w = Worker(level=3, platform="a2a3sim", runtime="tensormap_and_ringbuffer", device_ids=[0])
    h = w.register(probe(libs))
    w.init()
    try:

        def orch(o, _args, _cfg):
            ta = TaskArgs()
            for t, tag in ((x, TensorArgType.INPUT), (y, TensorArgType.OUTPUT_EXISTING), (info, TensorArgType.OUTPUT_EXISTING)):
                ta.add_tensor(make_tensor_arg(w, t), tag)
            o.submit_next_level(h, ta, CallConfig(), worker=0)

        w.run(orch)
        # A tensor that was not share_memory_()-ed is an input only, as upstream's.
        plain = make_tensor_arg(w, torch.zeros(8))
        TaskArgs().add_tensor(plain, TensorArgType.INPUT)
        with pytest.raises(ValueError, match="not granted by the buffer"):
            TaskArgs().add_tensor(plain, TensorArgType.OUTPUT_EXISTING)
        # A tensor over memory the chips map already is used as it is, and may be written.
        over = torch.from_numpy(taskring.shared_array(8))
        before = over.data_ptr()
        TaskArgs().add_tensor(make_tensor_arg(w, over), TensorArgType.OUTPUT_EXISTING)
        assert over.data_ptr() == before
    finally:
        w.close()
    assert torch.equal(x, y) and info.tolist() == [0, 32]


# ----- level 3 ---------------------------------------------------------------------------


def test_l3_per_task_runtime_env_and_scalars_on_two_chips(libs):
    """Upstream's per_task_runtime_env demo, in shape: one orchestration, a task per chip
    spec, each with its own CallConfig.runtime_env; the run's config is not inherited."""
    R, C = 4, 6
    specs = [
        {"ring_task_window": 16, "ring_heap": 1 << 20, "ring_dep_pool": 64},
        {"ring_task_window": [128, 64, 32, 16], "ring_heap": [8 << 20, 4 << 20, 2 << 20, 1 << 20], "ring_dep_pool": [256, 128, 64, 64]},
        {},
    ]
    w = Worker(level=3, platform="a2a3sim", runtime="tensormap_and_ringbuffer", device_ids=[0, 1], num_sub_workers=0)
    h = w.register(pipeline(libs))
    w.init()
    try:
        data = []
        for i in range(len(specs)):
            a = taskring.shared_array((R, C))
            a[...] = np.arange(R * C).reshape(R, C) + i
            b = taskring.shared_array((R, C))
            b[...] = 1.0 + i
            data.append((a, b, taskring.shared_array((R, C)), taskring.shared_array((C, R)), taskring.shared_array(R * C)))
        seen = []

        def orch(o, args, cfg):
            seen.append((args, cfg))
            for i, spec in enumerate(specs):
                task_cfg = CallConfig()
                for key, value in spec.items():
                    setattr(task_cfg.runtime_env, key, value)
                ta = pipeline_args(*[w.make_tensor_arg(t) for t in data[i]], alpha=float(i))
                o.submit_next_level(h, ta, task_cfg, worker=i % 2)

        base = CallConfig()
        assert w.run(orch, args="payload", config=base) is None
        rep = w.last_report
        assert seen == [("payload", base)]
        assert [t.worker for t in rep.tasks] == [0, 1, 0]
        assert [t.ring_sizing.task_window for t in rep.tasks] == [(16,) * 4, (128, 64, 32, 16), (16384,) * 4]
        assert [t.ring_sizing.heap for t in rep.tasks] == [(1 << 20,) * 4, (8 << 20, 4 << 20, 2 << 20, 1 << 20), (256 << 20,) * 4]
        for i, (a, b, out, t_out, _) in enumerate(data):
            np.testing.assert_allclose(out, expected_out(a, b, float(i)))
            np.testing.assert_allclose(t_out, (a + a + b).T)
    finally:
        w.close()


def test_l3_orchestrator_errors_and_child_memory(libs):
    w = Worker(level=3, platform="a2a3sim", runtime="tensormap_and_ringbuffer", device_ids=[0, 1])
    cc = pipeline(libs)
    h = w.register(cc)
    w.init()
    try:
        # A ChipCallable registered after init(): every chip process loads it then.
        late = w.register(probe(libs))
        x = taskring.shared_array(8)
        x[...] = np.arange(8)
        ys = [taskring.shared_array(8) for _ in range(2)]
        infos = [taskring.shared_array(2, np.int64) for _ in range(2)]

        def late_orch(o, _args, _cfg):
            for chip in (0, 1):
                ta = TaskArgs()
                ta.add_tensor(w.make_tensor_arg(x), TensorArgType.INPUT)
                ta.add_tensor(w.make_tensor_arg(ys[chip]), TensorArgType.OUTPUT_EXISTING)
                ta.add_tensor(w.make_tensor_arg(infos[chip]), TensorArgType.OUTPUT_EXISTING)
                o.submit_next_level(late, ta, worker=chip)

        w.run(late_orch)
        assert all((y == x).all() for y in ys) and [i.tolist() for i in infos] == [[0, 32]] * 2
        errors = []

        def orch(o, _args, _cfg):
            for call in (
                lambda: o.submit_next_level(cc, TaskArgs(), worker=0),
                lambda: o.submit_next_level(42, TaskArgs(), worker=0),
                lambda: o.submit_next_level(h, TaskArgs(), worker=True),
                lambda: o.submit_next_level(h, TaskArgs(), worker=-1),
                lambda: o.submit_next_level_group(h, [TaskArgs()], workers=[0, 1]),
                lambda: o.submit_next_level_group(h, [TaskArgs(), TaskArgs()], workers=[1, 1]),
            ):
                try:
                    call()
                except (TypeError, ValueError) as e:
                    errors.append(f"{type(e).__name__}: {e}")

        class SentinelError(Exception):
            pass

        def failing(o, _args, _cfg):
            raise SentinelError("boom")

        with pytest.raises(SentinelError, match="boom"):  # as it is raised
            w.run(failing)
        w.run(orch)
        assert errors == [
            "TypeError: orch.submit_next_level now takes a CallableHandle, not a ChipCallable. Register the callable "
            "before init() via `handle = worker.register(chip_callable)` and pass `handle` here.",
            "TypeError: orch.submit_next_level expects a CallableHandle returned by Worker.register",
            "TypeError: worker must be an integer NEXT_LEVEL worker id",
            "ValueError: worker must be a non-negative NEXT_LEVEL worker id",
            "ValueError: workers length must match args_list length",
            "ValueError: workers must not contain duplicate NEXT_LEVEL worker ids",
        ]

        # Child memory: charged to that chip, usable only by its tasks.
        used = w.committed_device_memory(1)
        buf = w.alloc_child_tensor(1, (4, 6), DataType.FLOAT32)
        assert w.committed_device_memory(1) == used + 96
        assert w.committed_device_memory(0) < used + 96
        with pytest.raises(IndexError, match="worker_id 2 out of range \\(have 2 chips\\)"):
            w.alloc_child_tensor(2, (1,), DataType.FLOAT32)

        def on_chip(chip):
            def orch(o, _args, _cfg):
                ta = TaskArgs()
                ta.add_tensor(buf.tensor(shapes=(4, 6), dtype=DataType.FLOAT32))
                for shape in ((4, 6), (4, 6), (6, 4), (24,)):
                    ta.add_tensor(w.make_tensor_arg(taskring.shared_array(shape)), TensorArgType.OUTPUT_EXISTING)
                ta.add_scalar(alpha_bits(1.0))
                o.submit_next_level(h, ta, worker=chip)

            return orch

        w.run(on_chip(1))
        with pytest.raises(ValueError, match="is a device tensor of chip 1; it cannot be passed to a task on chip 0"):
            w.run(on_chip(0))
        w.free(buf)
        assert w.committed_device_memory(1) == used
        with pytest.raises(TypeError, match="not in shared memory"):
            w.run(lambda o, a, c: o.submit_next_level(h, pipeline_args(*[np.zeros((4, 6), np.float32) for _ in range(5)], 0.0), worker=0))
    finally:
        w.close()

"""Ring sizing configuration: RunConfig (docs/api.md §1.1), RuntimeEnv / CallConfig (§1.2)
and resolve_ring_sizing / RingSizing (§1). Messages are checked verbatim."""

import dataclasses
import pickle
import re

import numpy as np
import pytest

from taskring import (
    DEFAULT_RING_DEP_POOL,
    DEFAULT_RING_HEAP,
    DEFAULT_RING_TASK_WINDOW,
    RUNTIME_ENV_RING_COUNT,
    CallConfig,
    RingSizing,
    RunConfig,
    RuntimeEnv,
    RuntimeFailure,
    resolve_ring_sizing,
)

INT32_MAX = 2**31 - 1

WINDOW_MSG = "ring_task_window must be a power of 2 >= 4, or 'auto', got {!r}"
WINDOW_MAX_MSG = "ring_task_window must be a power of 2 >= 4 and <= 1073741824, or 'auto', got {!r}"
HEAP_MSG = "ring_heap must be a power of 2 >= 1024 (bytes per ring), or 'auto', got {!r}"
DEP_MSG = "ring_dep_pool must be in [4, INT32_MAX], or 'auto', got {!r}"
ENTRY_PHRASE = {
    "ring_task_window": "be a power of 2 >= 4",
    "ring_heap": "be a power of 2 >= 1024 (bytes per ring)",
    "ring_dep_pool": "be in [4, INT32_MAX]",
}
SCALAR_MSG = {"ring_task_window": WINDOW_MSG, "ring_heap": HEAP_MSG, "ring_dep_pool": DEP_MSG}
RING_FIELDS = ("ring_task_window", "ring_heap", "ring_dep_pool")
PREFIX_MSG = (
    "CallConfig: output_prefix must be set whenever any of enable_chip_swimlane / "
    "enable_dep_gen / enable_scope_stats is enabled"
)
PLATFORM_MSG = "Invalid platform {!r}. Expected 'sim', 'a2a3sim', 'a5sim', 'a2a3', or 'a5'."
DEFAULT_KEY = (DEFAULT_RING_TASK_WINDOW,) * 4 + (DEFAULT_RING_HEAP,) * 4 + (DEFAULT_RING_DEP_POOL,) * 4


def raises_exactly(exc, message):
    """pytest.raises matching the whole message literally."""
    return pytest.raises(exc, match="^" + re.escape(message) + "$")


# ----- constants -------------------------------------------------------------------------


def test_constants():
    assert RUNTIME_ENV_RING_COUNT == 4
    assert DEFAULT_RING_TASK_WINDOW == 16384
    assert DEFAULT_RING_HEAP == 256 * 1024 * 1024
    assert DEFAULT_RING_DEP_POOL == 16384


# ----- RunConfig: scalar boundaries --------------------------------------------------------


@pytest.mark.parametrize("v", [4, 8, 16384, 2**30])
def test_run_config_window_accepts(v):
    assert RunConfig(ring_task_window=v).ring_task_window == v


@pytest.mark.parametrize("v", [3, 12, 0, 1, 2, 5, 2**30 + 1, -4])
def test_run_config_window_rejects(v):
    with raises_exactly(ValueError, WINDOW_MSG.format(v)):
        RunConfig(ring_task_window=v)


@pytest.mark.parametrize("v", [2**31, 2**32])
def test_run_config_window_power_of_two_above_max(v):
    with raises_exactly(ValueError, WINDOW_MAX_MSG.format(v)):
        RunConfig(ring_task_window=v)


@pytest.mark.parametrize("v", [1024, 2048, 8 * 1024 * 1024, 2**40])
def test_run_config_heap_accepts(v):
    assert RunConfig(ring_heap=v).ring_heap == v


@pytest.mark.parametrize("v", [1023, 1536, 512, 0, 3000])
def test_run_config_heap_rejects(v):
    with raises_exactly(ValueError, HEAP_MSG.format(v)):
        RunConfig(ring_heap=v)


@pytest.mark.parametrize("v", [4, 5, 256, INT32_MAX])
def test_run_config_dep_pool_accepts(v):
    assert RunConfig(ring_dep_pool=v).ring_dep_pool == v


@pytest.mark.parametrize("v", [3, 2**31, 0, -1])
def test_run_config_dep_pool_rejects(v):
    with raises_exactly(ValueError, DEP_MSG.format(v)):
        RunConfig(ring_dep_pool=v)


@pytest.mark.parametrize("field", RING_FIELDS)
@pytest.mark.parametrize("v", [True, False, 1024.0, np.int64(16), np.int64(1024), "16", "1024", b"16"])
def test_run_config_non_ints_rejected(field, v):
    with raises_exactly(ValueError, SCALAR_MSG[field].format(v)):
        RunConfig(**{field: v})


WINDOW_MAX_PHRASE = "be a power of 2 >= 4 and <= 1073741824"


@pytest.mark.parametrize(
    "field, v, phrase",
    [
        # Python ints have no upper bound; the rules (in Rust) still see them exactly.
        ("ring_task_window", 2**64, WINDOW_MAX_PHRASE),
        ("ring_task_window", 2**100, WINDOW_MAX_PHRASE),
        ("ring_task_window", 2**64 + 2, ENTRY_PHRASE["ring_task_window"]),
        ("ring_task_window", -(2**70), ENTRY_PHRASE["ring_task_window"]),
        ("ring_heap", 2**64, ENTRY_PHRASE["ring_heap"]),
        ("ring_heap", 2**100, ENTRY_PHRASE["ring_heap"]),
        ("ring_heap", -1024, ENTRY_PHRASE["ring_heap"]),
        ("ring_dep_pool", 2**64 - 1, ENTRY_PHRASE["ring_dep_pool"]),
        ("ring_dep_pool", 2**80, ENTRY_PHRASE["ring_dep_pool"]),
    ],
)
def test_run_config_ints_beyond_64_bits(field, v, phrase):
    with raises_exactly(ValueError, f"{field} must {phrase}, or 'auto', got {v!r}"):
        RunConfig(**{field: v})
    with raises_exactly(ValueError, f"{field} entries must {phrase}, or 'auto' (or 0 to keep default), got {v!r}"):
        RunConfig(**{field: [0, 0, 0, v]})


def test_run_config_int_subclass_is_not_an_int():
    import enum

    class Size(enum.IntEnum):
        W = 16

    with raises_exactly(ValueError, WINDOW_MSG.format(Size.W)):
        RunConfig(ring_task_window=Size.W)
    with raises_exactly(ValueError, "aicpu_thread_num must be 0 (auto) or in [2, 8], got " + repr(Size.W)):
        RunConfig(aicpu_thread_num=Size.W)


def test_run_config_list_subclass_stored_as_plain_list():
    class Rings(list):
        pass

    cfg = RunConfig(ring_heap=Rings([1024, 0, 0, 0]))
    assert type(cfg.ring_heap) is list and cfg.ring_heap == [1024, 0, 0, 0]


def test_run_config_rules_come_from_the_native_module():
    check = getattr(CallConfig, "_check_run_config_field")
    # It returns the value the field keeps: auto spelled "auto", a tuple as a list.
    assert check("ring_heap", None) is None
    assert check("ring_task_window", (0, 4, 0, 0)) == [0, 4, 0, 0]
    assert check("ring_heap", " AUTO") == "auto"
    assert check("ring_dep_pool", [4, "Auto", 0, 0]) == [4, "auto", 0, 0]
    with raises_exactly(ValueError, DEP_MSG.format(3)):
        check("ring_dep_pool", 3)
    with raises_exactly(ValueError, "enable_chip_swimlane must be a bool or an int in [0, 4], got None"):
        check("enable_chip_swimlane", None)
    with pytest.raises(ValueError, match="unknown field"):
        check("ring_window", 4)


@pytest.mark.parametrize("field", RING_FIELDS)
def test_run_config_unset_is_none(field):
    assert getattr(RunConfig(), field) is None
    assert getattr(RunConfig(**{field: None}), field) is None


# ----- RunConfig: lists -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "field,value",
    [
        ("ring_task_window", (4, 8, 16, 2**30)),
        ("ring_heap", (1024, 2048, 0, 4096)),
        ("ring_dep_pool", (4, 0, INT32_MAX, 5)),
    ],
)
def test_run_config_tuple_stored_as_list(field, value):
    cfg = RunConfig(**{field: value})
    got = getattr(cfg, field)
    assert type(got) is list
    assert got == list(value)


@pytest.mark.parametrize("field", RING_FIELDS)
def test_run_config_list_stored_as_list(field):
    cfg = RunConfig(**{field: [0, 0, 0, 0]})
    assert getattr(cfg, field) == [0, 0, 0, 0]


@pytest.mark.parametrize("field", RING_FIELDS)
@pytest.mark.parametrize("n", [0, 1, 3, 5])
def test_run_config_list_wrong_length(field, n):
    good = {"ring_task_window": 4, "ring_heap": 1024, "ring_dep_pool": 4}[field]
    msg = f"{field} must have exactly 4 entries (one per scope-depth ring), got {n}"
    with raises_exactly(ValueError, msg):
        RunConfig(**{field: [good] * n})
    with raises_exactly(ValueError, msg):
        RunConfig(**{field: tuple([good] * n)})


@pytest.mark.parametrize(
    "field,value",
    [
        ("ring_task_window", [4, 0, 0, 2**30]),
        ("ring_task_window", [0, 0, 0, 0]),
        ("ring_heap", [0, 1024, 0, 0]),
        ("ring_dep_pool", [INT32_MAX, 0, 4, 0]),
    ],
)
def test_run_config_list_zeros_accepted(field, value):
    assert getattr(RunConfig(**{field: value}), field) == value


@pytest.mark.parametrize(
    "field,bad",
    [
        ("ring_task_window", 3),
        ("ring_task_window", 12),
        ("ring_task_window", True),
        ("ring_task_window", 16.0),
        ("ring_task_window", np.int64(16)),
        ("ring_heap", 1023),
        ("ring_heap", 1536),
        ("ring_heap", True),
        ("ring_heap", "1024"),
        ("ring_dep_pool", 3),
        ("ring_dep_pool", 2**31),
        ("ring_dep_pool", False),
        ("ring_dep_pool", -1),
    ],
)
def test_run_config_list_bad_entry(field, bad):
    msg = f"{field} entries must {ENTRY_PHRASE[field]}, or 'auto' (or 0 to keep default), got {bad!r}"
    good = {"ring_task_window": 4, "ring_heap": 1024, "ring_dep_pool": 4}[field]
    with raises_exactly(ValueError, msg):
        RunConfig(**{field: [good, 0, bad, good]})


def test_run_config_list_first_bad_entry_wins():
    with raises_exactly(ValueError, "ring_heap entries must be a power of 2 >= 1024 (bytes per ring), or 'auto' (or 0 to keep default), got 1000"):
        RunConfig(ring_heap=[0, 1000, 3, 1024])


@pytest.mark.parametrize("field", RING_FIELDS)
def test_run_config_list_with_bools_rejected(field):
    # True == 1 and False == 0 in Python; neither may pass as an entry.
    for b in (True, False):
        with raises_exactly(ValueError, f"{field} entries must {ENTRY_PHRASE[field]}, or 'auto' (or 0 to keep default), got {b!r}"):
            RunConfig(**{field: [b, 0, 0, 0]})


# ----- RunConfig: order of checks, platform, the rest ---------------------------------------


def test_run_config_first_failure_wins_in_documented_order():
    bad = dict(
        platform="tpu",
        ring_task_window=3,
        ring_heap=1023,
        ring_dep_pool=3,
        aicpu_thread_num=9,
        enable_chip_swimlane=7,
    )
    with raises_exactly(ValueError, PLATFORM_MSG.format("tpu")):
        RunConfig(**bad)
    bad.pop("platform")
    with raises_exactly(ValueError, WINDOW_MSG.format(3)):
        RunConfig(**bad)
    bad.pop("ring_task_window")
    with raises_exactly(ValueError, HEAP_MSG.format(1023)):
        RunConfig(**bad)
    bad.pop("ring_heap")
    with raises_exactly(ValueError, DEP_MSG.format(3)):
        RunConfig(**bad)
    bad.pop("ring_dep_pool")
    with raises_exactly(ValueError, "aicpu_thread_num must be 0 (auto) or in [2, 8], got 9"):
        RunConfig(**bad)


def test_run_config_order_list_length_before_later_fields():
    with raises_exactly(ValueError, "ring_task_window must have exactly 4 entries (one per scope-depth ring), got 3"):
        RunConfig(ring_task_window=[4, 4, 4], ring_heap=[1], ring_dep_pool=1)
    with raises_exactly(ValueError, "ring_heap must have exactly 4 entries (one per scope-depth ring), got 5"):
        RunConfig(ring_heap=[1024] * 5, ring_dep_pool=3, aicpu_thread_num=1)


@pytest.mark.parametrize("p", ["x", "", "SIM", "a3", "ascend", "sim "])
def test_run_config_invalid_platform(p):
    with raises_exactly(ValueError, PLATFORM_MSG.format(p)):
        RunConfig(platform=p)


def test_run_config_invalid_platform_non_string():
    with raises_exactly(ValueError, PLATFORM_MSG.format(None)):
        RunConfig(platform=None)


@pytest.mark.parametrize("p", ["sim", "a2a3sim", "a5sim", "a2a3", "a5"])
def test_run_config_valid_platforms(p):
    assert RunConfig(platform=p).platform == p


@pytest.mark.parametrize("n", [None, 0, 2, 3, 8])
def test_run_config_aicpu_thread_num_accepts(n):
    assert RunConfig(aicpu_thread_num=n).aicpu_thread_num == n


@pytest.mark.parametrize("n", [1, 9, -1, True, 2.0, "2"])
def test_run_config_aicpu_thread_num_rejects(n):
    with raises_exactly(ValueError, f"aicpu_thread_num must be 0 (auto) or in [2, 8], got {n!r}"):
        RunConfig(aicpu_thread_num=n)


@pytest.mark.parametrize("s", [True, False, 0, 1, 4])
def test_run_config_swimlane_accepts(s):
    cfg = RunConfig(enable_chip_swimlane=s)
    assert cfg.enable_chip_swimlane is s  # kept as given
    # the dispatch's CallConfig carries it as a level: True is the fullest (4)
    assert cfg.to_call_config().enable_chip_swimlane == (4 if s is True else int(s))


@pytest.mark.parametrize("s", [5, -1, 1.0])
def test_run_config_swimlane_rejects(s):
    with pytest.raises(ValueError):
        RunConfig(enable_chip_swimlane=s)


def test_run_config_defaults():
    cfg = RunConfig()
    assert (cfg.platform, cfg.device_id, cfg.aicpu_thread_num) == ("sim", 0, None)
    assert (cfg.enable_scope_stats, cfg.enable_chip_swimlane, cfg.enable_dep_gen, cfg.output_dir) == (False, 0, False, None)
    assert [f.name for f in dataclasses.fields(RunConfig)] == [
        "platform", "device_id", "aicpu_thread_num", "ring_task_window", "ring_heap", "ring_dep_pool",
        "enable_scope_stats", "enable_chip_swimlane", "enable_dep_gen", "output_dir",
    ]


def test_dataclasses_replace_revalidates():
    cfg = RunConfig(ring_task_window=64)
    with raises_exactly(ValueError, WINDOW_MSG.format(12)):
        dataclasses.replace(cfg, ring_task_window=12)
    with raises_exactly(ValueError, HEAP_MSG.format(1536)):
        dataclasses.replace(cfg, ring_heap=1536)
    with raises_exactly(ValueError, PLATFORM_MSG.format("gpu")):
        dataclasses.replace(cfg, platform="gpu")
    with raises_exactly(ValueError, "aicpu_thread_num must be 0 (auto) or in [2, 8], got 1"):
        dataclasses.replace(cfg, aicpu_thread_num=1)
    ok = dataclasses.replace(cfg, ring_dep_pool=(4, 0, 0, 8))
    assert ok.ring_dep_pool == [4, 0, 0, 8] and ok.ring_task_window == 64
    assert cfg.ring_dep_pool is None


# ----- RunConfig.to_call_config --------------------------------------------------------------


def test_to_call_config_default_base():
    cc = RunConfig().to_call_config()
    assert isinstance(cc, CallConfig)
    assert cc == CallConfig()


def test_to_call_config_writes_only_non_none_ring_fields():
    cc = RunConfig(ring_task_window=128, ring_dep_pool=[0, 64, 0, 0]).to_call_config()
    assert cc.runtime_env.ring_task_window == [128] * 4
    assert cc.runtime_env.ring_heap == [0, 0, 0, 0]
    assert cc.runtime_env.ring_dep_pool == [0, 64, 0, 0]


def test_to_call_config_copies_base_without_mutating_it():
    base = CallConfig(aicpu_thread_num=4, runtime_env=RuntimeEnv(ring_heap=2048, ring_task_window=[8, 0, 0, 0]))
    before = base.copy()
    cc = RunConfig(ring_task_window=[0, 32, 0, 0]).to_call_config(base)
    assert cc is not base
    assert base == before  # not mutated
    assert base.runtime_env.ring_task_window == [8, 0, 0, 0]
    # ring_task_window given as a whole list replaces the base's list; ring_heap (None) is kept.
    assert cc.runtime_env.ring_task_window == [0, 32, 0, 0]
    assert cc.runtime_env.ring_heap == [2048] * 4
    assert cc.runtime_env.ring_dep_pool == [0] * 4
    assert cc.aicpu_thread_num == 4
    # The result does not share its RuntimeEnv with the base.
    cc.runtime_env.ring_dep_pool = 16
    assert base.runtime_env.ring_dep_pool == [0] * 4


def test_to_call_config_all_none_is_equal_copy_of_base():
    base = CallConfig(runtime_env=RuntimeEnv(ring_dep_pool=[4, 8, 16, 32]))
    cc = RunConfig().to_call_config(base)
    assert cc == base and cc is not base
    assert cc.runtime_env is not base.runtime_env


# ----- RuntimeEnv ------------------------------------------------------------------------------


def test_runtime_env_defaults():
    e = RuntimeEnv()
    for f in RING_FIELDS:
        assert getattr(e, f) == [0, 0, 0, 0]
        assert type(getattr(e, f)) is list


@pytest.mark.parametrize("field", RING_FIELDS)
@pytest.mark.parametrize("x", [0, 4, 1024, 3, 2**31])
def test_runtime_env_int_broadcast(field, x):
    # Assignment checks shape and type only (values are checked by validate()).
    assert getattr(RuntimeEnv(**{field: x}), field) == [x] * 4
    e = RuntimeEnv()
    setattr(e, field, x)
    assert getattr(e, field) == [x] * 4


@pytest.mark.parametrize("field", RING_FIELDS)
@pytest.mark.parametrize("v", [[1024, 0, 4096, 0], (4, 8, 16, 32)])
def test_runtime_env_four_values(field, v):
    e = RuntimeEnv(**{field: v})
    assert getattr(e, field) == list(v)
    assert type(getattr(e, field)) is list
    e2 = RuntimeEnv()
    setattr(e2, field, v)
    assert getattr(e2, field) == list(v)


def test_runtime_env_read_back_is_a_fresh_list():
    e = RuntimeEnv(ring_heap=[1024, 0, 0, 0])
    got = e.ring_heap
    got[1] = 2048
    assert e.ring_heap == [1024, 0, 0, 0]


@pytest.mark.parametrize("field", RING_FIELDS)
@pytest.mark.parametrize("n", [0, 3, 5])
def test_runtime_env_wrong_length(field, n):
    msg = f"RuntimeEnv.{field} list must contain exactly 4 entries"
    with raises_exactly(ValueError, msg):
        RuntimeEnv(**{field: [4] * n})
    e = RuntimeEnv()
    with raises_exactly(ValueError, msg):
        setattr(e, field, [4] * n)
    assert getattr(e, field) == [0, 0, 0, 0]


@pytest.mark.parametrize("field", RING_FIELDS)
@pytest.mark.parametrize("v", [None, 1.0, 1024.0, True, False, "1024", -1, [4, 4, 4, -1], [4, 4, 4, 4.0], [True, 0, 0, 0], [None, 0, 0, 0]])
def test_runtime_env_bad_type_on_assignment(field, v):
    e = RuntimeEnv(**{field: 8})
    with raises_exactly(ValueError, f"RuntimeEnv.{field} must be an int or 'auto' (broadcast), or a list of 4 of them"):
        setattr(e, field, v)
    assert getattr(e, field) == [8] * 4  # unchanged


@pytest.mark.parametrize("field", RING_FIELDS)
@pytest.mark.parametrize("v", [1.0, True, "1024", -1, [4, 4, 4, -1]])
def test_runtime_env_bad_type_in_constructor(field, v):
    with raises_exactly(ValueError, f"RuntimeEnv.{field} must be an int or 'auto' (broadcast), or a list of 4 of them"):
        RuntimeEnv(**{field: v})


@pytest.mark.parametrize("field", RING_FIELDS)
def test_runtime_env_none_in_constructor(field):
    with raises_exactly(ValueError, f"RuntimeEnv.{field} must be an int or 'auto' (broadcast), or a list of 4 of them"):
        RuntimeEnv(**{field: None})


def test_runtime_env_repr():
    e = RuntimeEnv(ring_task_window=[4, 8, 0, 0], ring_heap=1024)
    assert repr(e) == (
        "RuntimeEnv(ring_task_window=[4, 8, 0, 0], ring_heap=[1024, 1024, 1024, 1024], ring_dep_pool=[0, 0, 0, 0])"
    )
    assert repr(RuntimeEnv()) == "RuntimeEnv(ring_task_window=[0, 0, 0, 0], ring_heap=[0, 0, 0, 0], ring_dep_pool=[0, 0, 0, 0])"


def test_runtime_env_eq_copy_pickle():
    e = RuntimeEnv(ring_task_window=[4, 8, 0, 0], ring_heap=2048, ring_dep_pool=[0, 0, 0, 9])
    assert e == RuntimeEnv(ring_task_window=[4, 8, 0, 0], ring_heap=[2048] * 4, ring_dep_pool=[0, 0, 0, 9])
    assert e != RuntimeEnv()
    c = e.copy()
    assert c == e and c is not e
    c.ring_heap = 4096
    assert e.ring_heap == [2048] * 4
    p = pickle.loads(pickle.dumps(e))
    assert type(p) is RuntimeEnv and p == e and p is not e


# ----- CallConfig: runtime_env by reference, copy-in --------------------------------------------


def test_call_config_runtime_env_by_reference():
    cfg = CallConfig()
    cfg.runtime_env.ring_heap = 1 << 20
    assert cfg.runtime_env.ring_heap == [1 << 20] * 4
    env = cfg.runtime_env
    env.ring_task_window = [0, 64, 0, 0]
    assert cfg.runtime_env.ring_task_window == [0, 64, 0, 0]
    assert cfg != CallConfig()
    assert resolve_ring_sizing(cfg, env={}).heap == (1 << 20,) * 4


def test_call_config_runtime_env_assignment_copies_in():
    cfg = CallConfig()
    env = RuntimeEnv(ring_dep_pool=[4, 0, 0, 0])
    cfg.runtime_env = env
    assert cfg.runtime_env.ring_dep_pool == [4, 0, 0, 0]
    env.ring_dep_pool = 99
    assert cfg.runtime_env.ring_dep_pool == [4, 0, 0, 0]
    assert cfg.runtime_env is not env
    # The config's own RuntimeEnv object stays the one handed out before.
    held = cfg.runtime_env
    cfg.runtime_env = RuntimeEnv(ring_heap=2048)
    assert held.ring_heap == [2048] * 4
    assert held.ring_dep_pool == [0] * 4


def test_call_config_constructor_copies_runtime_env():
    env = RuntimeEnv(ring_heap=2048)
    cfg = CallConfig(runtime_env=env)
    env.ring_heap = 4096
    assert cfg.runtime_env.ring_heap == [2048] * 4


def test_call_config_defaults():
    cfg = CallConfig()
    assert cfg.aicpu_thread_num == 0
    assert cfg.runtime_env == RuntimeEnv()
    assert (cfg.enable_scope_stats, cfg.enable_chip_swimlane, cfg.enable_dep_gen, cfg.output_prefix) == (False, 0, False, "")
    cfg.validate()


# ----- CallConfig.validate -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [dict(enable_scope_stats=True), dict(enable_dep_gen=True), dict(enable_chip_swimlane=1), dict(enable_chip_swimlane=True)],
)
def test_validate_output_prefix_rule(kw):
    with raises_exactly(ValueError, PREFIX_MSG):
        CallConfig(**kw).validate()
    CallConfig(output_prefix="out", **kw).validate()


def test_validate_output_prefix_checked_before_rings():
    cfg = CallConfig(enable_dep_gen=True, runtime_env=RuntimeEnv(ring_task_window=3))
    with raises_exactly(ValueError, PREFIX_MSG):
        cfg.validate()
    cfg.output_prefix = "out"
    with raises_exactly(ValueError, "RuntimeEnv: ring_task_window[0] must be a power of 2 in [4, 1073741824], got 3"):
        cfg.validate()


@pytest.mark.parametrize(
    "field,values,msg",
    [
        ("ring_task_window", [0, 0, 12, 0], "RuntimeEnv: ring_task_window[2] must be a power of 2 in [4, 1073741824], got 12"),
        ("ring_task_window", [0, 3, 0, 0], "RuntimeEnv: ring_task_window[1] must be a power of 2 in [4, 1073741824], got 3"),
        ("ring_task_window", [0, 0, 0, 2**31], "RuntimeEnv: ring_task_window[3] must be a power of 2 in [4, 1073741824], got 2147483648"),
        ("ring_heap", [1023, 0, 0, 0], "RuntimeEnv: ring_heap[0] must be a power of 2 >= 1024 (bytes per ring), got 1023"),
        ("ring_heap", [0, 1536, 0, 0], "RuntimeEnv: ring_heap[1] must be a power of 2 >= 1024 (bytes per ring), got 1536"),
        ("ring_dep_pool", [0, 0, 0, 3], "RuntimeEnv: ring_dep_pool[3] must be in [4, 2147483647], got 3"),
        ("ring_dep_pool", [2**31, 0, 0, 0], "RuntimeEnv: ring_dep_pool[0] must be in [4, 2147483647], got 2147483648"),
    ],
)
def test_validate_ring_messages(field, values, msg):
    cfg = CallConfig()
    setattr(cfg.runtime_env, field, values)
    with raises_exactly(ValueError, msg):
        cfg.validate()


@pytest.mark.parametrize(
    "field,values",
    [
        ("ring_task_window", [4, 0, 2**30, 0]),
        ("ring_heap", [0, 1024, 0, 2**40]),
        ("ring_dep_pool", [4, INT32_MAX, 0, 0]),
    ],
)
def test_validate_boundaries_and_zeros_pass(field, values):
    cfg = CallConfig()
    setattr(cfg.runtime_env, field, values)
    cfg.validate()
    # The boundary values are sized as given; a zero is "not set" (the default).
    default = dict(zip(RING_FIELDS, (DEFAULT_RING_TASK_WINDOW, DEFAULT_RING_HEAP, DEFAULT_RING_DEP_POOL)))[field]
    rs = resolve_ring_sizing(cfg, env={})
    assert getattr(rs, field.removeprefix("ring_")) == tuple(v or default for v in values)
    assert [rs.source(field, r) for r in range(4)] == ["call_config" if v else "default" for v in values]
    zeros = CallConfig(runtime_env=RuntimeEnv(ring_task_window=0, ring_heap=0, ring_dep_pool=0))
    zeros.validate()
    assert resolve_ring_sizing(zeros, env={}).key() == DEFAULT_KEY


def test_validate_order_rings_then_fields():
    # ring 1 breaks dep pool, ring 2 breaks heap: ring 1 is reported first.
    env = RuntimeEnv(ring_dep_pool=[0, 3, 0, 0], ring_heap=[0, 0, 5, 0])
    with raises_exactly(ValueError, "RuntimeEnv: ring_dep_pool[1] must be in [4, 2147483647], got 3"):
        CallConfig(runtime_env=env).validate()
    # within one ring: window, then heap, then dep pool.
    env = RuntimeEnv(ring_task_window=[0, 6, 0, 0], ring_heap=[0, 5, 0, 0], ring_dep_pool=[0, 3, 0, 0])
    with raises_exactly(ValueError, "RuntimeEnv: ring_task_window[1] must be a power of 2 in [4, 1073741824], got 6"):
        CallConfig(runtime_env=env).validate()
    env.ring_task_window = 0
    with raises_exactly(ValueError, "RuntimeEnv: ring_heap[1] must be a power of 2 >= 1024 (bytes per ring), got 5"):
        CallConfig(runtime_env=env).validate()


# ----- CallConfig: repr, value semantics -----------------------------------------------------------


def test_call_config_repr_plain():
    assert repr(CallConfig()) == (
        "CallConfig(aicpu_thread_num=0, enable_chip_swimlane=0, enable_dep_gen=False, enable_scope_stats=False)"
    )


def test_call_config_repr_with_rings():
    cfg = CallConfig(aicpu_thread_num=4, enable_dep_gen=True)
    cfg.runtime_env.ring_task_window = [128, 64, 32, 16]
    assert repr(cfg) == (
        "CallConfig(aicpu_thread_num=4, enable_chip_swimlane=0, enable_dep_gen=True, enable_scope_stats=False"
        ", runtime_env.ring_task_window=[128, 64, 32, 16], runtime_env.ring_heap=[0, 0, 0, 0]"
        ", runtime_env.ring_dep_pool=[0, 0, 0, 0])"
    )


def test_call_config_repr_all_zero_rings_omitted():
    cfg = CallConfig(runtime_env=RuntimeEnv(ring_heap=[0, 0, 0, 0]))
    assert "runtime_env" not in repr(cfg)


def test_call_config_repr_with_output_prefix():
    cfg = CallConfig(enable_scope_stats=True, enable_chip_swimlane=2, output_prefix="/tmp/out")
    assert repr(cfg) == (
        "CallConfig(aicpu_thread_num=0, enable_chip_swimlane=2, enable_dep_gen=False, enable_scope_stats=True"
        ", output_prefix='/tmp/out')"
    )
    cfg.runtime_env.ring_heap = [0, 0, 0, 1024]
    assert repr(cfg) == (
        "CallConfig(aicpu_thread_num=0, enable_chip_swimlane=2, enable_dep_gen=False, enable_scope_stats=True"
        ", runtime_env.ring_task_window=[0, 0, 0, 0], runtime_env.ring_heap=[0, 0, 0, 1024]"
        ", runtime_env.ring_dep_pool=[0, 0, 0, 0], output_prefix='/tmp/out')"
    )
    assert repr(CallConfig(output_prefix="it's")).endswith(", output_prefix=\"it's\")")


def test_call_config_eq():
    a = CallConfig(aicpu_thread_num=2, runtime_env=RuntimeEnv(ring_heap=2048))
    b = CallConfig(aicpu_thread_num=2)
    b.runtime_env.ring_heap = [2048] * 4
    assert a == b
    b.runtime_env.ring_heap = [2048, 2048, 2048, 0]
    assert a != b
    assert CallConfig() == CallConfig()
    assert CallConfig() != CallConfig(output_prefix="x")
    assert CallConfig() != CallConfig(enable_scope_stats=True)
    assert CallConfig() != "CallConfig()"


def test_call_config_copy_is_independent():
    a = CallConfig(aicpu_thread_num=2, runtime_env=RuntimeEnv(ring_task_window=64), output_prefix="p")
    b = a.copy()
    assert b == a and b is not a
    assert b.runtime_env is not a.runtime_env
    b.runtime_env.ring_task_window = 128
    b.output_prefix = "q"
    assert a.runtime_env.ring_task_window == [64] * 4
    assert a.output_prefix == "p"


def test_call_config_derive():
    a = CallConfig(aicpu_thread_num=2, runtime_env=RuntimeEnv(ring_task_window=64))
    before = a.copy()
    b = a.derive(ring_heap=8 * 1024 * 1024)
    assert a == before
    assert b is not a
    assert b.runtime_env.ring_heap == [8 * 1024 * 1024] * 4
    assert b.runtime_env.ring_task_window == [64] * 4
    assert b.aicpu_thread_num == 2
    c = a.derive(ring_dep_pool=[0, 0, 0, 8], aicpu_thread_num=4)
    assert c.runtime_env.ring_dep_pool == [0, 0, 0, 8] and c.aicpu_thread_num == 4
    env = RuntimeEnv(ring_heap=[1024, 0, 0, 0])
    d = a.derive(runtime_env=env)
    assert d.runtime_env == env and d.runtime_env is not env
    assert d.runtime_env.ring_task_window == [0] * 4  # runtime_env= replaces the whole env
    assert a == before
    assert a.derive() == a and a.derive() is not a


def test_call_config_derive_shape_errors():
    a = CallConfig()
    with raises_exactly(ValueError, "RuntimeEnv.ring_heap list must contain exactly 4 entries"):
        a.derive(ring_heap=[1024] * 3)
    with raises_exactly(ValueError, "RuntimeEnv.ring_task_window must be an int or 'auto' (broadcast), or a list of 4 of them"):
        a.derive(ring_task_window=4.0)
    with pytest.raises(TypeError):
        a.derive(no_such_field=1)
    assert a == CallConfig()


def test_call_config_pickle_round_trip():
    a = CallConfig(aicpu_thread_num=3, enable_dep_gen=True, enable_chip_swimlane=4, output_prefix="out/dir")
    a.runtime_env.ring_task_window = [4, 8, 16, 0]
    a.runtime_env.ring_dep_pool = 100
    b = pickle.loads(pickle.dumps(a))
    assert type(b) is CallConfig
    assert b == a and b is not a
    assert repr(b) == repr(a)
    b.runtime_env.ring_heap = 1024
    assert a.runtime_env.ring_heap == [0] * 4


def test_runtime_failure_pickle_round_trip():
    f = RuntimeFailure(1, "SCOPE_DEADLOCK", 1, "desc", "hint", "ring_task_window", 4, 8)
    assert isinstance(f, RuntimeError)
    assert str(f) == "SCOPE_DEADLOCK (code 1) on ring 1: desc. Hint: hint"
    g = pickle.loads(pickle.dumps(f))
    assert type(g) is RuntimeFailure
    assert (g.code, g.name, g.ring, g.description, g.hint) == (1, "SCOPE_DEADLOCK", 1, "desc", "hint")
    assert (g.resource, g.configured, g.needed) == ("ring_task_window", 4, 8)
    assert str(g) == str(f)
    h = pickle.loads(pickle.dumps(RuntimeFailure(200, "TASK_FAILED", None, "d", "h")))
    assert h.ring is None and str(h) == "TASK_FAILED (code 200): d. Hint: h"


# ----- resolve_ring_sizing / RingSizing ---------------------------------------------------------


def test_resolve_defaults():
    s = resolve_ring_sizing(env={})
    assert isinstance(s, RingSizing)
    assert s.task_window == (DEFAULT_RING_TASK_WINDOW,) * 4
    assert s.heap == (DEFAULT_RING_HEAP,) * 4
    assert s.dep_pool == (DEFAULT_RING_DEP_POOL,) * 4
    for f in RING_FIELDS:
        for r in range(4):
            assert s.source(f, r) == "default"
    assert resolve_ring_sizing() == s  # conftest cleared PTO2_RING_*
    assert resolve_ring_sizing(None, None) == s


def test_resolve_precedence_per_resource_per_ring():
    cfg = CallConfig()
    cfg.runtime_env.ring_task_window = [64, 0, 0, 0]
    cfg.runtime_env.ring_dep_pool = [0, 0, 0, 8]
    env = {
        "PTO2_RING_TASK_WINDOW": "128,256,0,0",  # ring 0 overridden by the call config, ring 2/3 fall through
        "PTO2_RING_HEAP": "4096",  # one value: all rings
    }
    s = resolve_ring_sizing(cfg, env=env)
    assert s.task_window == (64, 256, DEFAULT_RING_TASK_WINDOW, DEFAULT_RING_TASK_WINDOW)
    assert [s.source("ring_task_window", r) for r in range(4)] == ["call_config", "env", "default", "default"]
    assert s.heap == (4096,) * 4
    assert [s.source("ring_heap", r) for r in range(4)] == ["env"] * 4
    assert s.dep_pool == (DEFAULT_RING_DEP_POOL,) * 3 + (8,)
    assert [s.source("ring_dep_pool", r) for r in range(4)] == ["default"] * 3 + ["call_config"]


def test_resolve_env_four_values_with_zeros_and_config_zero_entries():
    cfg = CallConfig(runtime_env=RuntimeEnv(ring_heap=[0, 2048, 0, 0]))
    s = resolve_ring_sizing(cfg, env={"PTO2_RING_HEAP": "0,0,8192,0", "PTO2_RING_DEP_POOL": " 5 , 0 , 0 , 6 "})
    assert s.heap == (DEFAULT_RING_HEAP, 2048, 8192, DEFAULT_RING_HEAP)
    assert [s.source("ring_heap", r) for r in range(4)] == ["default", "call_config", "env", "default"]
    assert s.dep_pool == (5, DEFAULT_RING_DEP_POOL, DEFAULT_RING_DEP_POOL, 6)


def test_resolve_accepts_run_config():
    s = resolve_ring_sizing(RunConfig(ring_task_window=[0, 32, 0, 0], ring_heap=1024), env={"PTO2_RING_TASK_WINDOW": "8"})
    assert s.task_window == (8, 32, 8, 8)
    assert s.heap == (1024,) * 4
    assert s.source("ring_task_window", 1) == "call_config"
    assert s.source("ring_task_window", 0) == "env"


def test_resolve_reads_process_env_when_no_mapping(monkeypatch):
    monkeypatch.setenv("PTO2_RING_DEP_POOL", "0,0,77,0")
    s = resolve_ring_sizing()
    assert s.dep_pool == (DEFAULT_RING_DEP_POOL, DEFAULT_RING_DEP_POOL, 77, DEFAULT_RING_DEP_POOL)
    assert s.source("ring_dep_pool", 2) == "env"
    # an explicit mapping replaces the process environment
    assert resolve_ring_sizing(env={}).dep_pool == (DEFAULT_RING_DEP_POOL,) * 4


def test_resolve_validates_config():
    cfg = CallConfig(runtime_env=RuntimeEnv(ring_heap=[0, 0, 1000, 0]))
    with raises_exactly(ValueError, "RuntimeEnv: ring_heap[2] must be a power of 2 >= 1024 (bytes per ring), got 1000"):
        resolve_ring_sizing(cfg, env={})


@pytest.mark.parametrize(
    "var,value",
    [
        ("PTO2_RING_HEAP", "abc"),
        ("PTO2_RING_HEAP", "1000"),
        ("PTO2_RING_HEAP", "1024,2048"),
        ("PTO2_RING_TASK_WINDOW", "12"),
        ("PTO2_RING_TASK_WINDOW", "64,64,64,64,64"),
        ("PTO2_RING_TASK_WINDOW", "-4"),
        ("PTO2_RING_DEP_POOL", "3"),
        ("PTO2_RING_DEP_POOL", "8,8,8,x"),
        ("PTO2_RING_DEP_POOL", "2147483648"),
    ],
)
def test_resolve_bad_env_var_ignored_with_warning(capfd, var, value):
    capfd.readouterr()
    # ring 1 of the good variable shows the rest of the env still applies
    other = "PTO2_RING_DEP_POOL" if var != "PTO2_RING_DEP_POOL" else "PTO2_RING_TASK_WINDOW"
    s = resolve_ring_sizing(env={var: value, other: "0,64,0,0"})
    out, err = capfd.readouterr()
    assert s.key() != DEFAULT_KEY
    field = {"PTO2_RING_TASK_WINDOW": "ring_task_window", "PTO2_RING_HEAP": "ring_heap", "PTO2_RING_DEP_POOL": "ring_dep_pool"}
    for r in range(4):
        assert s.source(field[var], r) == "default"  # ignored as a whole
    assert s.source(field[other], 1) == "env"
    lines = [ln for ln in err.splitlines() if var in ln]
    assert len(lines) == 1, err
    assert value in lines[0]
    assert other not in err


def test_resolve_bad_env_var_ignored_as_a_whole(capfd):
    s = resolve_ring_sizing(env={"PTO2_RING_TASK_WINDOW": "64,12,0,0"})
    assert s.task_window == (DEFAULT_RING_TASK_WINDOW,) * 4
    assert "PTO2_RING_TASK_WINDOW" in capfd.readouterr().err


def test_resolve_good_env_no_warning(capfd):
    capfd.readouterr()
    resolve_ring_sizing(env={"PTO2_RING_TASK_WINDOW": "64", "PTO2_RING_HEAP": "0,1024,0,0"})
    assert capfd.readouterr().err == ""


def test_ring_sizing_str():
    s = resolve_ring_sizing(CallConfig(runtime_env=RuntimeEnv(ring_task_window=[4, 8, 16, 32], ring_heap=[0, 1024, 0, 0])), env={})
    assert str(s) == (
        "Ring buffer sizes: "
        "ring0 window=4 heap=268435456 dep_pool=16384; "
        "ring1 window=8 heap=1024 dep_pool=16384; "
        "ring2 window=16 heap=268435456 dep_pool=16384; "
        "ring3 window=32 heap=268435456 dep_pool=16384"
    )
    assert "\n" not in str(s)
    assert str(resolve_ring_sizing(env={})).startswith("Ring buffer sizes: ring0 window=16384 heap=268435456 dep_pool=16384; ring1 ")


def test_ring_sizing_key_hash_eq():
    d = resolve_ring_sizing(env={})
    key = d.key()
    assert isinstance(key, tuple) and len(key) == 12
    assert key == DEFAULT_KEY
    explicit = resolve_ring_sizing(
        CallConfig(runtime_env=RuntimeEnv(ring_task_window=DEFAULT_RING_TASK_WINDOW, ring_heap=DEFAULT_RING_HEAP)), env={}
    )
    assert explicit.source("ring_task_window", 0) == "call_config"
    assert explicit == d  # sources are not part of the value
    assert hash(explicit) == hash(d)
    assert explicit.key() == d.key()
    assert len({d, explicit}) == 1
    from_env = resolve_ring_sizing(env={"PTO2_RING_DEP_POOL": str(DEFAULT_RING_DEP_POOL)})
    assert from_env == d and hash(from_env) == hash(d)
    other = resolve_ring_sizing(RunConfig(ring_task_window=[0, 0, 0, 4]), env={})
    assert other != d
    assert other.key() == (16384, 16384, 16384, 4) + DEFAULT_KEY[4:]
    assert len({d, other, explicit}) == 2


def test_ring_sizing_immutable():
    s = resolve_ring_sizing(env={})
    with pytest.raises(AttributeError):
        s.task_window = (4, 4, 4, 4)
    with pytest.raises(AttributeError):
        s.heap = (1024,) * 4
    assert isinstance(s.task_window, tuple) and isinstance(s.heap, tuple) and isinstance(s.dep_pool, tuple)


def test_ring_sizing_source_bad_arguments():
    s = resolve_ring_sizing(env={})
    with pytest.raises(ValueError):
        s.source("ring_task_window", 4)
    with pytest.raises(ValueError):
        s.source("nope", 0)

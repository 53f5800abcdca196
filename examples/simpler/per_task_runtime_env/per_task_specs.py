"""The L2 tasks of the per-task runtime_env demo and how each one's CallConfig is made."""

ROWS, COLS = 64, 128
RING_FIELDS = ("ring_task_window", "ring_heap", "ring_dep_pool")

# One entry per L2 task: its chip, its inputs' fill values and its own ring sizing. A
# scalar applies to all four rings; a list of four sizes each ring (scope depth 0..3);
# a field left out falls through to the chip's PTO2_RING_* environment, then the default.
L2_TASKS = [
    {"label": "small", "worker": 0, "a": 2.0, "b": 3.0, "ring_task_window": 16, "ring_heap": 1 << 20, "ring_dep_pool": 64},
    {"label": "large", "worker": 1, "a": 5.0, "b": 7.0, "ring_task_window": 128, "ring_heap": 8 << 20, "ring_dep_pool": 256},
    {
        "label": "per_ring",
        "worker": 0,
        "a": 1.0,
        "b": 4.0,
        "ring_task_window": [128, 64, 32, 16],
        "ring_heap": [8 << 20, 4 << 20, 2 << 20, 1 << 20],
    },
]


COPIED_FIELDS = (
    "aicpu_thread_num",
    "enable_chip_swimlane",
    "enable_dump_args",
    "enable_pmu",
    "enable_dep_gen",
    "enable_scope_stats",
    "output_prefix",
)


def l2_config(base, spec, config_cls):
    """This task's CallConfig: the base config's thread count, diagnostics and output
    prefix (so diagnostics the harness switched on reach the chip), with the task's own
    ring sizing."""
    cfg = config_cls()
    for field in COPIED_FIELDS:
        if hasattr(base, field):
            setattr(cfg, field, getattr(base, field))
    for key in RING_FIELDS:
        if key in spec:
            setattr(cfg.runtime_env, key, spec[key])
    return cfg

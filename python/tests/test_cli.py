"""`python -m taskring sizing`: advice from a real run's scope stats."""

import subprocess
import sys

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K


@taskring.program(signature=[IN, OUT])
def steps(rt, x, out):
    with rt.scope():
        prev = x
        for _ in range(6):
            prev = rt.submit(K.scale, inputs=[prev], outputs=[rt.spec(x.shape, x.dtype)], scalars=[1.0]).outputs[0]
        rt.submit(K.copy, inputs=[prev], outputs=[out])


def test_sizing_advice_from_scope_stats(tmp_path):
    x = np.ones(256, np.float32)
    out = np.zeros_like(x)
    cfg = taskring.CallConfig(enable_scope_stats=True, output_prefix=str(tmp_path))
    rep = taskring.run(steps, x, out, config=cfg)
    assert rep.peak.task_window[1] == 7
    path = tmp_path / "scope_stats" / "scope_stats.jsonl"
    r = subprocess.run([sys.executable, "-m", "taskring", "sizing", str(path), "--headroom", "1.0"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert '"ring_task_window": [4, 8, 4, 4]' in r.stdout, r.stdout
    assert "PTO2_RING_TASK_WINDOW=4,8,4,4" in r.stdout
    # The advice runs the program.
    env_line = [l for l in r.stdout.splitlines() if l.startswith("runtime_env")][0]
    advice = eval(env_line.split("=", 1)[1])  # a dict literal printed by the tool
    cfg2 = taskring.CallConfig()
    for k, v in advice.items():
        setattr(cfg2.runtime_env, k, v)
    taskring.run(steps, x, out, config=cfg2)
    assert np.array_equal(out, x)


def test_sizing_bad_file(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("not json\n")
    r = subprocess.run([sys.executable, "-m", "taskring", "sizing", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and "line 1" in r.stderr

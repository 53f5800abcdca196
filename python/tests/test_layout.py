"""The package's layout: `taskring/__init__.py` only gathers the public names (imports and
`__all__`), each concept in a module of its own; the imports between the package's modules
point one way (no circle, counting imports inside functions and under `TYPE_CHECKING`);
`Worker(level=N)` is an instance of one class per level."""

import ast
import os
import pickle

import pytest

import taskring

PKG_DIR = os.path.dirname(os.path.abspath(taskring.__file__))


def _modules(pkg_dir, pkg):
    """Module name -> path of each Python source of the package (``None`` for an extension
    module, known by its stub)."""
    mods = {}
    for f in sorted(os.listdir(pkg_dir)):
        stem, ext = os.path.splitext(f)
        if ext == ".py":
            mods[pkg if stem == "__init__" else f"{pkg}.{stem}"] = os.path.join(pkg_dir, f)
        elif ext == ".pyi" and f"{pkg}.{stem}" not in mods:
            mods[f"{pkg}.{stem}"] = None
    return mods


def import_graph(pkg_dir, pkg="taskring"):
    """Module -> the set of the package's modules it imports, from every import statement
    of its source (at the top, in functions, under ``if TYPE_CHECKING``)."""
    mods = _modules(pkg_dir, pkg)
    graph = {m: set() for m in mods}
    for mod, path in mods.items():
        if path is None:
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        here = mod if mod == pkg else mod.rsplit(".", 1)[0]  # the package a relative import starts from
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                # `from X import Y` imports the module X.Y when there is one, else X.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                # `import taskring.x.y` depends on the deepest module of the package it names.
                while t and t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != mod:
                    graph[mod].add(t)
    return graph


def find_cycle(graph):
    """A circle of imports as a list of modules (first == last), or None."""
    state = {}  # module -> 1 while on the path, 2 when done

    def visit(m, path):
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n, path)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [])
            if found:
                return found
    return None


def test_imports_between_the_package_modules_point_one_way():
    graph = import_graph(PKG_DIR)
    assert "taskring._worker" in graph and "taskring._native" in graph, sorted(graph)
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_circle_check_finds_circles(tmp_path):
    # The same check on a made-up package: a lazy import back, and a module importing
    # the package whose __init__ imports it, are circles; a one-way chain is not.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from ._a import A\n")
    (pkg / "_a.py").write_text("from ._b import B\nA = 1\n")
    (pkg / "_b.py").write_text("B = 2\n\ndef f():\n    from ._a import A\n    return A\n")
    assert find_cycle(import_graph(str(pkg), "pkg")) == ["pkg._a", "pkg._b", "pkg._a"]
    (pkg / "_b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg\nB = 2\n")
    assert find_cycle(import_graph(str(pkg), "pkg")) == ["pkg", "pkg._a", "pkg._b", "pkg"]
    (pkg / "_b.py").write_text("from . import _c\nB = 2\n")
    (pkg / "_c.py").write_text("C = 3\n")
    assert find_cycle(import_graph(str(pkg), "pkg")) is None
    assert import_graph(str(pkg), "pkg")["pkg._b"] == {"pkg._c"}


def test_init_only_imports_and_all():
    path = os.path.join(PKG_DIR, "__init__.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the module docstring
    others = [
        f"line {s.lineno}: {ast.unparse(s).splitlines()[0]}"
        for s in body
        if not isinstance(s, (ast.Import, ast.ImportFrom))
        and not (isinstance(s, ast.Assign) and [ast.unparse(t) for t in s.targets] == ["__all__"])
    ]
    assert not others, "taskring/__init__.py holds more than imports and __all__:\n" + "\n".join(others)
    alls = [s for s in body if isinstance(s, ast.Assign)]
    assert len(alls) == 1, "one __all__"


def test_every_public_name_is_the_packages():
    assert len(taskring.__all__) == len(set(taskring.__all__))
    ns = {}
    exec("from taskring import *", ns)
    assert set(taskring.__all__) <= set(ns)
    # What the Python layer defines names the package as its module (reprs, pickles and
    # help() show the public path), wherever its code lives.
    for name in ["ArgDirection", "TensorArgType", "DataType", "Program", "ChipWorker", "Worker", "RunHandle",
                 "kernel", "load_kernel", "program", "run", "suggest_sizing", "shared_array"]:
        assert getattr(taskring, name).__module__ == "taskring", name
    for member in (taskring.IN, taskring.SCALAR, taskring.TensorArgType.NO_DEP, taskring.DataType.BFLOAT16):
        assert pickle.loads(pickle.dumps(member)) is member
    assert pickle.loads(pickle.dumps(taskring.run)) is taskring.run
    assert repr(taskring.IN) == "<ArgDirection.IN: 0>"


def test_worker_is_one_class_per_level():
    w2 = taskring.Worker(level=2)
    w3 = taskring.Worker(level=3, device_ids=[0, 1])
    w4 = taskring.Worker(level=4)
    classes = [type(w) for w in (w2, w3, w4)]
    assert len(set(classes)) == 3 and taskring.Worker not in classes
    for level, w in zip((2, 3, 4), (w2, w3, w4)):
        assert isinstance(w, taskring.Worker) and w.level == level
    assert taskring.Worker().level == 2
    assert w3.device_ids == [0, 1] and w2.device_ids == [0] and w4.device_ids == []
    # What each level does not have is the same as ever.
    assert w2.pids == () and w4.pids == () and w2.num_hosts == 0 and w3.num_hosts == 0
    with pytest.raises(RuntimeError, match="^alloc_tensor on a Worker is for level 4"):
        w3.alloc_tensor(4)
    for w in (w2, w3, w4):
        with pytest.raises(RuntimeError, match=r"^Worker.init\(\) has not been called \(or the worker is closed\)$"):
            w.arena_stats()
        with pytest.raises(RuntimeError, match=r"^Worker.init\(\) has not been called \(or the worker is closed\)$"):
            w.run(lambda o, a, c: None)
        w.close()


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"level": 5}, ValueError, "Worker level must be 2, 3 or 4, got 5"),
        ({"level": "3"}, ValueError, "Worker level must be 2, 3 or 4, got '3'"),
        ({"level": 5, "bogus": 1}, TypeError, "Worker() got unexpected keyword(s) bogus; allowed: level, device_id, "
         "device_ids, platform, num_sub_workers, arena_cache_slots, chip_processes, chip_cores, device_memory"),
        ({"level": 3}, TypeError, "Worker(level=3) needs device_ids=[...]"),
        ({"level": 3, "device_ids": []}, ValueError, "device_ids must not be empty"),
        ({"level": 3, "device_ids": [0, 0]}, ValueError, "device_ids must be distinct, got [0, 0]"),
        ({"level": 2, "device_id": -1}, ValueError, "device_ids must be non-negative device indices, got [-1]"),
        ({"level": 2, "platform": "gpu"}, ValueError,
         "Invalid platform 'gpu'. Expected 'sim', 'a2a3sim', 'a5sim', 'a2a3', or 'a5'."),
        ({"level": 3, "device_ids": [0], "platform": "a5"}, RuntimeError,
         "platform 'a5' needs an Ascend device and driver; this build runs the 'sim' platform only"),
        ({"level": 4, "device_ids": [0]}, TypeError, "Worker(level=4) takes arena_cache_slots and chip_processes, not device_ids"),
    ],
)
def test_worker_argument_errors(kwargs, error, text):
    with pytest.raises(error) as ei:
        taskring.Worker(**kwargs)
    assert str(ei.value) == text

"""`pip install .`'s build backend (build_backend/taskring_build.py): maturin's, with the
cargo feature `mpi` (L4) when Open MPI and libclang are found as the Makefile's
MPI_FEATURES finds them, and a line saying what to install when they are not; and the
`report` extra of pyproject.toml."""

import glob
import importlib.util
import os
import re
import shlex
import shutil
import tomllib

import pytest

pytest.importorskip("maturin")

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYPROJECT = os.path.join(REPO, "pyproject.toml")


def _backend():
    with open(PYPROJECT, "rb") as f:
        system = tomllib.load(f)["build-system"]
    (where,) = system["backend-path"]
    path = os.path.join(REPO, where, system["build-backend"] + ".py")
    spec = importlib.util.spec_from_file_location("taskring_build_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def backend(monkeypatch):
    monkeypatch.delenv("TASKRING_MPI", raising=False)
    monkeypatch.delenv("MATURIN_PEP517_ARGS", raising=False)
    return _backend()


def _machine(monkeypatch, tools=("mpicc", "mpirun"), libclang=True):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: f"/usr/bin/{name}" if name in tools else None)
    real_glob = glob.glob
    monkeypatch.setattr(glob, "glob", lambda p, *a, **k: (["/usr/lib/llvm-14/lib/libclang.so"] if libclang else [])
                        if p.startswith("/usr/lib/llvm-") else real_glob(p, *a, **k))


def test_l4_is_built_when_open_mpi_and_libclang_are_found(backend, monkeypatch, capsys):
    _machine(monkeypatch)
    assert backend.mpi_missing() == []
    assert backend.with_l4(["--profile", "release"]) == ["--profile", "release", "--features", "mpi"]
    assert "building with L4" in capsys.readouterr().err


@pytest.mark.parametrize("tools, libclang, named", [
    (("mpirun",), True, ["mpicc on PATH"]),
    ((), True, ["mpicc on PATH", "mpirun on PATH"]),
    (("mpicc", "mpirun"), False, ["libclang (/usr/lib/llvm-*/lib/libclang*.so*)"]),
])
def test_without_mpi_the_build_says_what_to_install(backend, monkeypatch, capsys, tools, libclang, named):
    _machine(monkeypatch, tools, libclang)
    assert backend.mpi_missing() == named
    assert backend.with_l4([]) == []
    err = capsys.readouterr().err
    assert err.startswith("taskring build: building WITHOUT L4 (Worker(level=4)): not found: " + ", ".join(named)), err
    assert "apt-get install -y openmpi-bin libopenmpi-dev libclang-dev" in err


def test_the_makefile_looks_for_the_same(backend):
    # What the backend looks for is what `make py-dev` looks for.
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as f:
        line = next(l for l in f if l.startswith("MPI_FEATURES"))
    assert "command -v mpicc" in line and "command -v mpirun" in line
    assert backend.LIBCLANG_GLOB in line


def test_taskring_mpi_and_given_features_decide(backend, monkeypatch, capsys):
    _machine(monkeypatch)
    monkeypatch.setenv("TASKRING_MPI", "0")
    assert backend.with_l4([]) == []
    assert "TASKRING_MPI=0" in capsys.readouterr().err
    _machine(monkeypatch, tools=())
    monkeypatch.setenv("TASKRING_MPI", "1")
    assert backend.with_l4([]) == ["--features", "mpi"]
    monkeypatch.delenv("TASKRING_MPI")
    for given in (["--features", "mpi"], ["--features=foo,mpi"], ["-F", "mpi"], ["--all-features"]):
        assert backend.with_l4(list(given)) == given


def test_the_arguments_reach_maturin_through_its_env_var(backend, monkeypatch):
    _machine(monkeypatch)
    monkeypatch.setenv("MATURIN_PEP517_ARGS", "--profile dev")
    assert backend._settings(None, False) is None
    assert shlex.split(os.environ["MATURIN_PEP517_ARGS"]) == ["--profile", "dev", "--features", "mpi"]
    # A build-args setting wins over the env var (as in maturin's backend) and moves into it.
    rest = backend._settings({"maturin.build-args": "--locked", "other": "x"}, False)
    assert rest == {"other": "x"}
    assert shlex.split(os.environ["MATURIN_PEP517_ARGS"]) == ["--locked", "--features", "mpi"]
    for hook in ("build_wheel", "build_editable", "build_sdist", "prepare_metadata_for_build_wheel",
                 "get_requires_for_build_wheel", "get_requires_for_build_sdist"):
        assert callable(getattr(backend, hook)), hook


def test_report_extra_brings_the_pinned_matplotlib():
    with open(PYPROJECT, "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    with open(os.path.join(REPO, "python", "requirements-dev.txt"), encoding="utf-8") as f:
        pin = re.search(r"^matplotlib==\S+", f.read(), re.M).group(0)
    assert extras["report"] == [pin]

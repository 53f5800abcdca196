"""The C++ compiler KernelCompiler runs, and what it can build.

A source needs one of three levels:

* ``"c++17"``: an orchestration;
* ``"c++23"``: a plain C++ kernel (built as C++23, as upstream's simulator builds kernels);
* ``"pto"``: a kernel that includes PTO-ISA: C++23 with ``_Float16`` arithmetic and a
  ``static_assert(false)`` in a template that is never instantiated (P2593). gcc >= 13
  and clang >= 17 have both; gcc 12 (Debian 12's) has ``_Float16`` but not the second.

The compiler is ``TASKRING_CXX`` when set (used whatever it supports; a source it cannot
build is an error naming it), else ``CXX`` when it supports the level, else the first of
``clang++-19``, ``clang++``, ``g++`` on ``PATH`` that does. Either variable may carry flags
after the compiler (``CXX="g++-14 -pipe"``).

What a compiler supports is found by compiling tiny probes once per compiler binary
(identified by its resolved path, size and modification time) and remembered in the cache
directory, so a process whose libraries all come from the cache runs no compiler at all.

clang over a libstdc++ without ``<stdfloat>`` (libstdc++ 12) would make PTO-ISA read bf16
data as fp16. For it an incore build gets taskring's ``<stdfloat>`` (``std::bfloat16_t`` is
``__bf16``), ``-D__STDCPP_BFLOAT16_T__=1`` and compiler-rt's builtins library, which holds
the bf16 conversions (``__truncsfbf2``); Debian's package for it is ``libclang-rt-19-dev``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

logger = logging.getLogger(__name__)

#: The compilers tried, in order, when neither TASKRING_CXX nor CXX names a suitable one.
CANDIDATES = ("clang++-19", "clang++", "g++")
LEVELS = ("c++17", "c++23", "pto")
_PROBE_SCHEMA = 2

_PROBES: Dict[str, Tuple[List[str], str]] = {
    "c++17": (["-std=c++17"], "int taskring_probe() { return 0; }\n"),
    "c++23": (["-std=c++23"], "int taskring_probe() { return 0; }\n"),
    "pto": (
        ["-std=c++23"],
        "template <typename T> struct taskring_probe_t {\n"
        "    static void f() { static_assert(false, \"never instantiated\"); }\n"
        "};\n"
        "_Float16 taskring_probe_h = static_cast<_Float16>(1.5f);\n"
        "float taskring_probe() { return static_cast<float>(taskring_probe_h * taskring_probe_h); }\n",
    ),
    "stdfloat": (
        ["-std=c++23"],
        "#include <stdfloat>\n"
        "#if !defined(__STDCPP_BFLOAT16_T__)\n#error no bfloat16_t\n#endif\n"
        "std::bfloat16_t taskring_probe_b{1.0f};\n",
    ),
}


def cache_dir() -> Path:
    """``TASKRING_CACHE_DIR``, default ``~/.cache/taskring``."""
    raw = os.environ.get("TASKRING_CACHE_DIR", "").strip()
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "taskring"


@dataclass(frozen=True)
class Toolchain:
    """One C++ compiler as probed: ``argv`` (the compiler and the flags its variable
    carried), its identity, family and what it can build."""

    argv: Tuple[str, ...]
    path: str
    identity: str
    version: str
    is_clang: bool
    levels: Tuple[str, ...]
    has_stdfloat: bool
    builtins_lib: Optional[str]
    origin: str = field(default="", compare=False)

    def supports(self, level: str) -> bool:
        return level in self.levels

    @property
    def needs_bf16_shim(self) -> bool:
        """clang without a ``<stdfloat>`` of its library: incore builds get taskring's."""
        return self.is_clang and not self.has_stdfloat

    def describe(self) -> str:
        return f"{shlex.join(self.argv)} ({self.version})"


def _identity(path: str) -> str:
    real = os.path.realpath(path)
    st = os.stat(real)
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


def _run_quiet(cmd: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=False, capture_output=True, text=True, timeout=timeout)


def _probe(argv: Tuple[str, ...], path: str) -> Toolchain:
    """Run the probes of one compiler (a few tiny compiles, about a second)."""
    head = _run_quiet([*argv, "--version"])
    version = (head.stdout or head.stderr).strip().splitlines()[0] if (head.stdout or head.stderr).strip() else "?"
    macros = _run_quiet([*argv, "-x", "c++", "-dM", "-E", os.devnull]).stdout
    is_clang = "#define __clang__ " in macros
    ok = {}
    with tempfile.TemporaryDirectory(prefix="taskring-probe-") as tmp:
        for name, (flags, text) in _PROBES.items():
            src = Path(tmp) / f"{name.replace('+', 'p')}.cpp"
            src.write_text(text)
            ok[name] = _run_quiet([*argv, *flags, "-fsyntax-only", str(src)]).returncode == 0
    builtins = None
    if is_clang:
        out = _run_quiet([*argv, "--rtlib=compiler-rt", "-print-libgcc-file-name"]).stdout.strip()
        builtins = out if out and os.path.isfile(out) else None
    return Toolchain(
        argv=argv,
        path=path,
        identity=_identity(path),
        version=version,
        is_clang=is_clang,
        levels=tuple(lv for lv in LEVELS if ok[lv]),
        has_stdfloat=ok["stdfloat"],
        builtins_lib=builtins,
    )


_probed: Dict[Tuple[str, ...], Toolchain] = {}


def probe(argv: Sequence[str], origin: str = "") -> Optional[Toolchain]:
    """What the compiler ``argv`` can build (None when ``argv[0]`` is not found).
    Remembered per process and, per compiler binary, in the cache directory."""
    argv = tuple(argv)
    path = shutil.which(argv[0])
    if path is None:
        return None
    ident = _identity(path)
    key = (ident, *argv)
    if key in _probed:
        return _probed[key]
    digest = hashlib.sha256(json.dumps([_PROBE_SCHEMA, ident, list(argv)]).encode()).hexdigest()[:32]
    record = cache_dir() / "toolchains" / f"{digest}.json"
    tc: Optional[Toolchain] = None
    try:
        data = json.loads(record.read_text())
        data["argv"] = tuple(data["argv"])
        data["levels"] = tuple(data["levels"])
        tc = Toolchain(**data)
        if tc.identity != ident or (tc.builtins_lib and not os.path.isfile(tc.builtins_lib)):
            tc = None
    except (OSError, ValueError, TypeError, KeyError):
        tc = None
    if tc is None:
        tc = _probe(argv, path)
        logger.debug("probed %s: %s", tc.describe(), tc)
        _write_atomic(record, json.dumps(asdict(tc), indent=1).encode())
    tc = Toolchain(**{**asdict(tc), "argv": argv, "levels": tuple(tc.levels), "origin": origin})
    _probed[key] = tc
    return tc


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (best effort: a
    cache that cannot be written only costs a later rebuild)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        logger.warning("taskring compile cache: could not write %s: %s", path, e)


_LEVEL_TEXT = {
    "c++17": "C++17",
    "c++23": "C++23",
    "pto": "C++23 with _Float16 and static_assert(false) in templates (what PTO-ISA needs: g++ >= 13 or clang >= 17)",
}


def select(level: str) -> Toolchain:
    """The compiler for a source of ``level`` (see the module's docstring); RuntimeError
    when there is none, naming what was tried and how to get one."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    tried = []
    for var in ("TASKRING_CXX", "CXX"):
        raw = os.environ.get(var, "").strip()
        if not raw:
            continue
        argv = shlex.split(raw)
        tc = probe(argv, origin=var)
        if tc is None:
            if var == "TASKRING_CXX":
                raise RuntimeError(f"TASKRING_CXX={raw}: {argv[0]} not found")
            tried.append(f"CXX={raw} (not found)")
            continue
        if tc.supports(level):
            return tc
        if var == "TASKRING_CXX":
            raise RuntimeError(
                f"TASKRING_CXX={raw} ({tc.version}) cannot build this source: it needs {_LEVEL_TEXT[level]}"
            )
        tried.append(f"CXX={raw} ({tc.version}: no {level})")
    for name in CANDIDATES:
        tc = probe([name], origin="PATH")
        if tc is None:
            tried.append(f"{name} (not found)")
            continue
        if tc.supports(level):
            return tc
        tried.append(f"{name} ({tc.version}: no {level})")
    raise RuntimeError(
        f"no C++ compiler found that supports {_LEVEL_TEXT[level]}; tried: {'; '.join(tried)}. "
        "Install clang-19 (Debian: apt-get install clang-19 libclang-rt-19-dev, or `make clang`) "
        "or g++ >= 13, or set TASKRING_CXX"
    )


def forget_probes() -> None:
    """Drop this process's memory of probed compilers (the cache directory keeps its own)."""
    _probed.clear()

"""``KernelCompiler``: C++ orchestrations and kernels to shared-library bytes, as upstream
Simpler's simulator builds them, against taskring's headers.

* ``compile_orchestration(runtime_name, source_path, extra_include_dirs=())``: an
  orchestration, ``-shared -fPIC -O2 -std=c++17`` (and ``-fno-gnu-unique`` with g++, so
  the library unloads), include path: taskring's ``pto2`` headers, then the extra ones.
* ``compile_incore(source_path, core_type="aiv", pto_isa_root=None, extra_include_dirs=())``:
  a kernel, ``-shared -fPIC -O2 -std=c++23 -D__CPU_SIM -DPTO_CPU_MAX_THREADS=1 -DNDEBUG``
  with ``-D__DAV_VEC__`` (aiv) or ``-D__DAV_CUBE__`` (aic) and ``-fpermissive`` with g++;
  include path: ``<pto_isa_root>/include`` and ``<pto_isa_root>/include/pto`` when a root
  is given, taskring's ``pto2_incore`` (``pipe_sync.h``) and ``pto2`` headers, then the
  extra ones.

The compiler, and the bf16 handling a clang over libstdc++ 12 needs, are
``toolchain``'s; results are cached by content (``compile_cache``). A failed compile is a
RuntimeError with the command and the compiler's output. ``platform`` is ``"a2a3sim"`` or
``"a2a3"``: both build for taskring's simulated a2a3 chip (host shared libraries).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

from .._include import include_dir
from . import compile_cache
from .toolchain import Toolchain, select

logger = logging.getLogger(__name__)

RUNTIME = "tensormap_and_ringbuffer"
PLATFORMS = ("a2a3sim", "a2a3")
CORE_TYPES = ("aiv", "aic")


def run_compiler(cmd: Sequence[str]) -> subprocess.CompletedProcess:
    """Run one compile (the only place KernelCompiler runs a compiler to build)."""
    return subprocess.run(list(cmd), check=False, capture_output=True, text=True)


def _abs_dirs(dirs: Optional[Iterable[str]]) -> List[str]:
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [os.fspath(dirs)]  # one directory given as a plain path
    return [os.path.abspath(os.fspath(d)) for d in (dirs or ())]


class KernelCompiler:
    """Builds orchestration and kernel libraries (bytes) for taskring's simulated a2a3 chip.

    ``compiled`` and ``cache_hits`` count this instance's builds and cache hits."""

    #: Upstream's sanitizer switch (its conftest sets it); taskring builds without sanitizers.
    _sanitizers = ""

    def __init__(self, platform: str = "a2a3sim") -> None:
        if platform not in PLATFORMS:
            raise ValueError(
                f"Unknown platform: {platform}. taskring simulates an a2a3 chip: use 'a2a3sim' or 'a2a3'"
            )
        self.platform = platform
        self.compiled = 0
        self.cache_hits = 0

    # -- include directories ------------------------------------------------------------

    def get_orchestration_include_dirs(self, runtime_name: str) -> List[str]:
        """The include directories of an orchestration of ``runtime_name`` (taskring's
        ``pto2`` headers: ``pto_orchestration_api.h``, ``tensor.h`` and the rest).
        ValueError for a runtime other than ``"tensormap_and_ringbuffer"``."""
        _check_runtime(runtime_name)
        return [os.path.join(include_dir(), "pto2")]

    def get_incore_include_dirs(self) -> List[str]:
        """The include directories on every kernel build: taskring's ``pto2_incore``
        (``pipe_sync.h``) and ``pto2`` (``tensor.h``, ``intrinsic.h``, ...)."""
        root = include_dir()
        return [os.path.join(root, "pto2_incore"), os.path.join(root, "pto2")]

    def get_platform_include_dirs(self) -> List[str]:
        """Upstream's platform headers have no counterpart here: taskring's are in
        ``pto2`` (``get_orchestration_include_dirs``). Empty."""
        return []

    # -- flags ----------------------------------------------------------------------------

    @staticmethod
    def orchestration_flags(tc: Toolchain) -> List[str]:
        flags = ["-shared", "-fPIC", "-O2", "-std=c++17"]
        if not tc.is_clang:
            flags.append("-fno-gnu-unique")
        return flags

    @staticmethod
    def incore_flags(tc: Toolchain, core_type: str) -> List[str]:
        flags = [
            "-shared",
            "-fPIC",
            "-O2",
            "-std=c++23",
            "-D__CPU_SIM",
            "-DPTO_CPU_MAX_THREADS=1",
            "-DNDEBUG",
            "-D__DAV_VEC__" if core_type == "aiv" else "-D__DAV_CUBE__",
            "-Wno-ignored-attributes",
        ]
        if tc.is_clang:
            flags.append("-Wno-macro-redefined")
        else:
            flags.append("-fpermissive")
        return flags

    def _bf16_flags(self, tc: Toolchain, pto: bool) -> tuple[List[str], List[str]]:
        """(compile flags, link inputs) giving an incore build a real bf16 on clang over a
        libstdc++ without <stdfloat>; nothing for other compilers."""
        if not tc.needs_bf16_shim:
            return [], []
        if tc.builtins_lib is None:
            if pto:
                raise RuntimeError(
                    f"{tc.describe()} has no <stdfloat> in its C++ library and compiler-rt's builtins "
                    "library was not found: PTO-ISA would read bf16 data as fp16. Install it "
                    "(Debian: apt-get install libclang-rt-19-dev, or `make clang`) or use g++ >= 13 (TASKRING_CXX)"
                )
            return [], []
        shim = os.path.join(include_dir(), "pto2_stdfloat")
        return ["-D__STDCPP_BFLOAT16_T__=1", "-isystem", shim], [tc.builtins_lib]

    # -- compiling ------------------------------------------------------------------------

    def compile_incore(
        self,
        source_path: str,
        core_type: str = "aiv",
        pto_isa_root: Optional[str] = None,
        extra_include_dirs: Optional[Sequence[str]] = (),
        build_dir: Optional[str] = None,
    ) -> bytes:
        """A kernel source (``extern "C" void kernel_entry(int64_t *args)``) built into a
        shared library for ``core_type`` ``"aiv"`` or ``"aic"``; returns its bytes.

        ``pto_isa_root``: a PTO-ISA checkout whose headers the kernel includes (see
        ``pto_isa.ensure_pto_isa_root``). ``build_dir``: also leave the library there.
        FileNotFoundError for a missing source or PTO-ISA root, ValueError for another
        core type, RuntimeError when the compile fails."""
        if core_type not in CORE_TYPES:
            raise ValueError(f"core_type must be 'aiv' or 'aic', got {core_type!r}")
        source = _existing_source(source_path)
        pto = pto_isa_root is not None and str(pto_isa_root) != ""
        tc = select("pto" if pto else "c++23")
        dirs: List[str] = []
        if pto:
            root = os.path.abspath(os.fspath(pto_isa_root))  # type: ignore[arg-type]
            if not os.path.isdir(os.path.join(root, "include")):
                raise FileNotFoundError(f"PTO-ISA headers not found: {os.path.join(root, 'include')}")
            dirs += [os.path.join(root, "include"), os.path.join(root, "include", "pto")]
        dirs += self.get_incore_include_dirs() + _abs_dirs(extra_include_dirs)
        cflags, link = self._bf16_flags(tc, pto)
        flags = self.incore_flags(tc, core_type) + cflags
        label = f"Incore ({core_type.upper()})"
        return self._build(tc, flags, dirs, link, source, label, build_dir, f"{core_type}")

    def compile_orchestration(
        self,
        runtime_name: str,
        source_path: str,
        extra_include_dirs: Optional[Sequence[str]] = (),
        build_dir: Optional[str] = None,
    ) -> bytes:
        """An orchestration source (exporting its entry, by default
        ``aicpu_orchestration_entry``, and optionally ``aicpu_orchestration_config``) built
        into a shared library; returns its bytes. ValueError for a runtime other than
        ``"tensormap_and_ringbuffer"``, FileNotFoundError for a missing source,
        RuntimeError when the compile fails."""
        dirs = self.get_orchestration_include_dirs(runtime_name) + _abs_dirs(extra_include_dirs)
        source = _existing_source(source_path)
        tc = select("c++17")
        return self._build(tc, self.orchestration_flags(tc), dirs, [], source, "Orchestration", build_dir, "orch")

    def _build(
        self,
        tc: Toolchain,
        flags: List[str],
        dirs: List[str],
        link: List[str],
        source: str,
        label: str,
        build_dir: Optional[str],
        tag: str,
    ) -> bytes:
        includes = [f"-I{d}" for d in dict.fromkeys(dirs)]
        src_bytes = Path(source).read_bytes()
        key = compile_cache.make_key(
            [tc.identity, tc.version, list(tc.argv), flags, includes, link, source, hashlib.sha256(src_bytes).hexdigest()]
        )
        data = compile_cache.lookup(key)
        if data is not None:
            self.cache_hits += 1
            logger.info("[%s] %s: cached (%d bytes)", label, source, len(data))
        else:
            data = self._run(tc, flags, includes, link, source, label, key)
            self.compiled += 1
        if build_dir is not None:
            os.makedirs(build_dir, exist_ok=True)
            out = os.path.join(build_dir, f"{Path(source).stem}.{tag}.so")
            with open(out, "wb") as f:
                f.write(data)
        return data

    def _run(
        self, tc: Toolchain, flags: List[str], includes: List[str], link: List[str], source: str, label: str, key: str
    ) -> bytes:
        with tempfile.TemporaryDirectory(prefix="taskring-cc-") as tmp:
            out = os.path.join(tmp, "lib.so")
            dep = os.path.join(tmp, "lib.d")
            cmd = [*tc.argv, *flags, *includes, "-MD", "-MF", dep, "-o", out, source, *link]
            logger.info("[%s] compiling %s", label, source)
            logger.debug("  command: %s", shlex.join(cmd))
            try:
                res = run_compiler(cmd)
            except OSError as e:
                raise RuntimeError(f"{label} compilation could not run: {e}\ncommand: {shlex.join(cmd)}") from e
            if res.returncode != 0 or not os.path.isfile(out):
                output = "\n".join(s for s in (res.stderr.strip(), res.stdout.strip()) if s)
                raise RuntimeError(
                    f"{label} compilation failed with exit code {res.returncode}: {source}\n"
                    f"command: {shlex.join(cmd)}\n"
                    f"compiler output:\n{output}"
                )
            data = Path(out).read_bytes()
            try:
                deps = compile_cache.parse_depfile(Path(dep).read_text())
            except OSError:
                deps = []
            if deps:
                deps = [os.path.abspath(d) for d in deps] + [p for p in link if os.path.isfile(p)]
                compile_cache.store(key, data, deps, cmd)
        logger.info("[%s] built %s: %d bytes", label, source, len(data))
        return data


def _check_runtime(runtime_name: str) -> None:
    if runtime_name != RUNTIME:
        raise ValueError(f"Unknown runtime_name: {runtime_name!r}; taskring supports {RUNTIME!r}")


def _existing_source(source_path: str) -> str:
    source = os.path.abspath(os.fspath(source_path))
    if not os.path.isfile(source):
        raise FileNotFoundError(f"Source file not found: {source}")
    return source

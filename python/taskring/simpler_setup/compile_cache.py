"""The cache of compiled libraries, by content.

An entry is found by a key over the source's bytes and path, the whole compile command
(compiler, flags, include directories) and the compiler's identity (resolved path, size,
modification time, version), plus this package's compiling code. The entry records every
file the compile read (the compiler's ``-MD`` dependency list: the source and each header,
system headers included) with a hash of its content; a lookup re-hashes them and is a hit
only when all are unchanged. So a hit runs no compiler, and an edited header, a different
PTO-ISA checkout, other flags or another compiler build anew.

Entries live under ``<TASKRING_CACHE_DIR>/kernels/`` (``~/.cache/taskring`` by default): a
``<key>.so`` and its ``<key>.json``. Deleting the directory is always safe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .toolchain import _write_atomic, cache_dir

logger = logging.getLogger(__name__)

_SCHEMA = 1
#: This package's modules whose code decides a library's bytes.
_LOGIC_MODULES = ("kernel_compiler.py", "toolchain.py", "compile_cache.py")


@lru_cache(maxsize=None)
def logic_token() -> str:
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in _LOGIC_MODULES:
        h.update(name.encode())
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(b"?")
    return h.hexdigest()


_digests: Dict[str, Tuple[int, int, str]] = {}


def file_digest(path: str) -> Optional[str]:
    """The sha256 of a file's content (None when it cannot be read). Remembered per
    process while the file's size and modification time stay the same, so the headers
    many kernels share are read once."""
    try:
        st = os.stat(path)
        known = _digests.get(path)
        if known is not None and known[0] == st.st_mtime_ns and known[1] == st.st_size:
            return known[2]
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None
    _digests[path] = (st.st_mtime_ns, st.st_size, digest)
    return digest


def make_key(parts: Sequence[object]) -> str:
    return hashlib.sha256(json.dumps([_SCHEMA, logic_token(), *parts], sort_keys=True).encode()).hexdigest()


def _paths(key: str) -> Tuple[Path, Path]:
    base = cache_dir() / "kernels" / key[:2]
    return base / f"{key}.so", base / f"{key}.json"


def lookup(key: str) -> Optional[bytes]:
    """The library cached under ``key`` when every file it was built from is unchanged."""
    lib, meta = _paths(key)
    try:
        record = json.loads(meta.read_text())
        for path, digest in record["deps"]:
            if file_digest(path) != digest:
                logger.debug("compile cache: %s changed since %s was built", path, key[:12])
                return None
        data = lib.read_bytes()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
        return None
    return data


def store(key: str, data: bytes, deps: Sequence[str], command: Sequence[str]) -> None:
    """Record ``data`` under ``key`` with the files it was built from."""
    lib, meta = _paths(key)
    entries: List[Tuple[str, str]] = []
    for d in dict.fromkeys(deps):
        digest = file_digest(d)
        if digest is None:
            return  # a dependency vanished while compiling: do not cache what cannot be checked
        entries.append((d, digest))
    _write_atomic(lib, data)
    _write_atomic(
        meta,
        json.dumps({"sha256": hashlib.sha256(data).hexdigest(), "command": list(command), "deps": entries}, indent=1).encode(),
    )


def parse_depfile(text: str) -> List[str]:
    """The prerequisites of a make rule as ``-MD`` writes it (``target: a.cpp b.h \\``
    continuation lines, ``\\ `` for a space in a path); the targets are left out."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    tokens: List[str] = []
    cur: List[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in " #":
            cur.append(text[i + 1])
            i += 2
            continue
        if c == "$" and i + 1 < len(text) and text[i + 1] == "$":
            cur.append("$")
            i += 2
            continue
        if c.isspace():
            if cur:
                tokens.append("".join(cur))
                cur = []
        else:
            cur.append(c)
        i += 1
    if cur:
        tokens.append("".join(cur))
    deps: List[str] = []
    in_prereqs = False
    for t in tokens:
        if t.endswith(":") and not in_prereqs:
            in_prereqs = True
            continue
        if t == ":":
            in_prereqs = True
            continue
        if in_prereqs:
            deps.append(t)
    return deps

"""``simpler.callable_identity.CallableHandle``: the token ``Worker.register`` returns."""

from __future__ import annotations

from typing import Optional


class CallableHandle:
    """An opaque handle of a registered callable: ``hashid`` (``"sha256:<64 hex>"`` of
    the callable's content), ``kind`` and ``target_namespace``."""

    __slots__ = ("hashid", "kind", "target_namespace", "_handle_id", "_owner_id")

    def __init__(self, hashid: str, kind: str, target_namespace: str) -> None:
        if not isinstance(hashid, str):
            raise TypeError("CallableHandle hashid must be a string")
        if not hashid.startswith("sha256:"):
            raise ValueError("HASHID_FORMAT_INVALID: hashid must start with 'sha256:'")
        self.hashid = hashid
        self.kind = kind
        self.target_namespace = target_namespace
        self._handle_id = -1
        self._owner_id: Optional[str] = None

    @property
    def digest(self) -> bytes:
        return bytes.fromhex(self.hashid[len("sha256:") :])

    def __repr__(self) -> str:
        return f"CallableHandle(hashid={self.hashid!r}, kind={self.kind!r}, target_namespace={self.target_namespace!r})"

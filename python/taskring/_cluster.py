"""L4: several hosts over MPI (docs/api.md §9) — ``Worker(level=4)`` (``_L4Worker``):
which rank does what at ``init()``, and a host's serving loop.

Every rank runs the same script. MPI is finalized when the process exits, not when the
worker closes: after ``close()`` a script may still use MPI; rank 0 exiting with a
non-zero status (an uncaught exception) ends the job with ``MPI_Abort`` instead. ``init()`` reads its rank from the MPI launcher's
environment *before* MPI is initialised: a host (ranks 1..N) first starts its L3 node,
forking its chip processes while it has no MPI threads, then initialises MPI and
serves rank 0's tasks until rank 0 closes; rank 0 initialises MPI and returns True.
"""

from __future__ import annotations

import atexit
import os
import sys
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._node import DistributedProgram, DistributedWorker
from ._shared import array_over, shared_array
from ._worker import Worker

if TYPE_CHECKING:
    from numpy.typing import DTypeLike


def _launch_hint() -> str:
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "script.py"
    return (
        "Worker(level=4) needs an MPI launch with at least 2 ranks (rank 0 orchestrates, "
        f"ranks 1..N are hosts): run `taskring launch --hosts N {script}` "
        f"(or `mpirun -np N+1 python {script}`)"
    )


# What Open MPI's mpirun sets for every rank besides OMPI_COMM_WORLD_RANK/SIZE (4.x:
# PMIx and ORTE; 5.x: PMIx).
_LAUNCH_COMPANIONS = ("PMIX_NAMESPACE", "PMIX_RANK", "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_ess_base_jobid")


def _stale_launch_env() -> Optional[str]:
    """Why the MPI rank variables of this environment cannot be a running launch's, or
    None. Read before MPI is initialised (which, with such variables, makes the process a
    job of its own, or aborts it)."""
    env = os.environ
    if "OMPI_COMM_WORLD_RANK" in env and not any(k in env for k in _LAUNCH_COMPANIONS):
        return f"none of the variables mpirun sets with OMPI_COMM_WORLD_RANK ({', '.join(_LAUNCH_COMPANIONS)}) is set"
    tmp = env.get("PMIX_SERVER_TMPDIR")
    if tmp and not os.path.isdir(tmp):
        return f"the directory of the PMIx server that launched it (PMIX_SERVER_TMPDIR={tmp}) no longer exists"
    return None


def _not_a_launch(rank: int, size: int, why: str) -> RuntimeError:
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "script.py"
    names = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE")
    found = " ".join(f"{k}={os.environ[k]}" for k in names if k in os.environ)
    return RuntimeError(
        f"Worker(level=4): this process is MPI rank {rank} of {size} by its environment ({found}), "
        f"but it is not part of a running MPI job: {why}. The variables were set by hand or are left "
        f"from a launch that has ended (e.g. in a shell started under mpirun): unset them and start "
        f"the job with `taskring launch --hosts N {script}`"
    )


def _mpi_init_as(rank: int, size: int) -> None:
    """Initialises MPI and checks that it agrees with the launcher's environment: a rank
    that counts on ranks MPI does not have would wait for them forever."""
    _mpi_init(rank)
    got = _native.Mpi.init()  # MPI is up: the world's (rank, size)
    if tuple(got) != (rank, size):
        raise _not_a_launch(rank, size, f"MPI_Init made it rank {got[0]} of {got[1]}")


class _L4Worker(Worker, level=4):
    """``Worker(level=4, arena_cache_slots=4, chip_processes=True)``: rank 0 orchestrates,
    ranks 1..N are hosts, each an L3 node of its own."""

    def __init__(self, level: Any = None, **kwargs: Any) -> None:
        # ``level`` is this class's own: ``Worker.__new__`` chose the class by it.
        allowed = {"level", "arena_cache_slots", "chip_processes", "platform"}
        extra = sorted(set(kwargs) - allowed)
        if extra:
            raise TypeError(f"Worker(level=4) takes arena_cache_slots and chip_processes, not {', '.join(extra)}")
        self.device_ids = []
        self.arena_cache_slots = kwargs.get("arena_cache_slots", 4)
        self.chip_processes = bool(kwargs.get("chip_processes", True))
        self._programs: List[DistributedProgram] = []
        self._cluster: Optional[Any] = None
        self._rank: Optional[int] = None
        self._closed = False

    # -- who is who -------------------------------------------------------------------
    @property
    def num_hosts(self) -> int:
        env = _native.Mpi.launch_env()
        return env[1] - 1 if env else 0

    def register(self, program: Any) -> int:
        if not isinstance(program, DistributedProgram):
            raise TypeError(f"Worker(level=4).register() needs a taskring.DistributedProgram, got {type(program).__name__}")
        if not program.signature:
            raise ValueError(f"DistributedProgram {program.name!r} needs signature=[...] to run at L4 (its arguments travel to a host)")
        if self._rank is not None:
            raise RuntimeError("register() must be called on every rank before init()")
        _check_name(program)
        self._programs.append(program)
        return len(self._programs) - 1

    # -- life ---------------------------------------------------------------------------
    def init(self, prewarm_config: Any = None) -> bool:
        if self._rank is not None:
            return self._rank == 0 and not self._closed
        for p in self._programs:  # a name may have been changed since register()
            _check_name(p)
        if not _native.mpi_built():
            raise RuntimeError(_native.MPI_MISSING)
        env = _native.Mpi.launch_env()
        if env is None or env[1] < 2:
            raise RuntimeError(_launch_hint())
        rank, size = env
        why = _stale_launch_env()
        if why is not None:
            raise _not_a_launch(rank, size, why)
        if rank == 0:
            _mpi_init_as(rank, size)
            self._rank = 0
            progs = [(p.name, [int(s) for s in p.signature]) for p in self._programs]
            self._cluster = _native.Cluster(size - 1, progs, arena_cache_slots=self.arena_cache_slots)
            atexit.register(_close_at_exit, weakref.ref(self), os.getpid())
            # Rank 0 says why it ends when mpirun ends the job (a rank died): SIGTERM,
            # then SIGKILL --kill-timeout seconds later (at 0, both at once).
            _native.Mpi.say_at_sigterm()
            return True
        self._rank = rank
        self._serve_until_closed(prewarm_config, size)
        return False

    def _serve_until_closed(self, prewarm_config: Any, size: int) -> None:
        if not self._programs:
            raise RuntimeError("a host has no DistributedProgram registered (register() on every rank before init())")
        # Chips first, while this process has no MPI threads.
        dw = DistributedWorker(self._programs, prewarm=prewarm_config, chip_processes=self.chip_processes)
        try:
            _mpi_init_as(self._rank or 0, size)
            _Host(self._programs, dw).serve()
        finally:
            dw.close()
            self._closed = True

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    # -- rank 0 -------------------------------------------------------------------------
    def _live(self) -> Any:
        if self._cluster is None:
            if self._rank is not None and self._rank > 0:
                raise RuntimeError(f"rank {self._rank} is a host: only rank 0 runs L4 orchestrations")
            raise RuntimeError("Worker.init() has not been called (or the worker is closed)")
        return self._cluster

    def _run(self, orch: Callable[..., Any], args: Any, cfg: _native.CallConfig) -> Any:
        return self._live().run(orch, cfg, (args, cfg))

    def alloc_tensor(self, shape: Union[int, Sequence[int]], dtype: DTypeLike = np.float32, worker: int = 0) -> Any:
        if isinstance(worker, bool) or not isinstance(worker, int):
            raise TypeError("worker must be an int")
        hosts = self._live().hosts
        if not 0 <= worker < hosts:
            raise ValueError(f"worker {worker} is not a host of this job (it has {hosts} hosts)")
        if isinstance(shape, int):
            shape = (shape,)
        return _native.HostTensor(worker, [int(d) for d in shape], np.dtype(dtype).name)


# The longest program name an L4 task frame carries (cluster::wire::MAX_NAME_BYTES).
MAX_NAME_BYTES = 256


def _check_name(program: Any) -> None:
    """An L4 program's name travels with each of its tasks (the host checks it): at most
    ``MAX_NAME_BYTES`` bytes of UTF-8."""
    name = program.name
    if not isinstance(name, str):
        raise TypeError(f"DistributedProgram name must be a str, got {type(name).__name__}")
    try:
        n = len(name.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise ValueError(f"DistributedProgram name {name[:40]!r} cannot be encoded as UTF-8 ({e.reason}); an L4 program name travels as UTF-8") from None
    if n > MAX_NAME_BYTES:
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise ValueError(f"DistributedProgram name {shown!r} is {n} bytes in UTF-8; an L4 program name is at most {MAX_NAME_BYTES} bytes (UTF-8)")


_mpi_started = False


def _mpi_init(rank: int) -> None:
    """MPI is initialised once per process and finalized when the process exits (so a
    script may still use MPI after its L4 worker closed, e.g. to measure it).

    Rank 0 finalizes after Python has exited, with the exit status in hand: a non-zero
    one (an uncaught exception, ``sys.exit(n)``) ends the job with ``MPI_Abort``, as
    ``MPI_Finalize`` would wait for hosts that may be waiting for rank 0. A host
    finalizes in ``atexit`` and waits there for the rest of the job."""
    global _mpi_started
    _native.Mpi.init()
    if not _mpi_started:
        _mpi_started = True
        if rank != 0 or not _native.Mpi.finalize_at_exit():
            atexit.register(_mpi_finalize, os.getpid())


def _mpi_finalize(pid: int) -> None:
    if os.getpid() != pid:
        return  # a forked child of this rank exits: MPI is the parent's
    # With a host lost, the native finalize ends the job with MPI_Abort: what this
    # process printed is flushed first.
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001 - a closed stream has nothing to flush
            pass
    _native.Mpi.finalize()


def _close_at_exit(ref: "weakref.ref[_L4Worker]", pid: int) -> None:
    # Rank 0 leaving without close() would leave its hosts serving: close for it (not
    # in a forked child of rank 0, which has its memory but neither its threads nor its
    # place in MPI).
    w = ref()
    if w is not None and os.getpid() == pid:
        w.close()


class _Host:
    """A host rank's serving loop: one L4 task at a time on its L3 node."""

    def __init__(self, programs: List[DistributedProgram], dw: DistributedWorker) -> None:
        self.programs = programs
        self.dw = dw
        # What each request needs of its program, looked up once: name (checked against
        # the request's), orchestration, chip handles.
        self._entries = [(p.name, p.orchestration, dw._handles[id(p)]) for p in programs]
        # Per argument position, a shared buffer reused by later tasks (chips map it
        # once) and the last array over it: (mem, shape, dtype, array, address);
        # host-resident tensors by id.
        self.pool: Dict[int, Tuple[Any, Tuple[int, ...], str, np.ndarray, int]] = {}
        self.resident: Dict[int, np.ndarray] = {}

    def _pooled(self, i: int, shape: Tuple[int, ...], dtype: str, nbytes: int) -> Tuple[np.ndarray, int]:
        """The array for shipped argument `i` and its address: over the position's pooled
        shared buffer, the same array again while the shape and dtype repeat (making an
        array and asking for its address cost ~3 µs each)."""
        got = self.pool.get(i)
        if got is not None and got[1] == shape and got[2] == dtype:
            return got[3], got[4]
        mem = got[0] if got is not None else None
        if mem is None or mem.nbytes < nbytes:
            mem = _native.SharedMem(max(nbytes, 64, 2 * (mem.nbytes if mem is not None else 0)))
        arr = array_over(mem, shape, dtype)
        self.pool[i] = (mem, shape, dtype, arr, mem.address)
        return arr, mem.address

    def _resident(self, tid: int, shape: Tuple[int, ...], dtype: str) -> np.ndarray:
        a = self.resident.get(tid)
        if a is None:
            a = shared_array(shape, dtype)
            self.resident[tid] = a
        return a

    def serve(self) -> None:
        node = self.dw._worker._node
        assert node is not None, "the host's node is open while it serves"
        # Requests whose arguments are all scalars are served natively; the others
        # (shipped and host-resident tensors) come back to `_one`.
        _native.host_serve(node, self._entries, lambda req: self._one(req, node))

    def _buffers(self, req: Any) -> Tuple[Tuple[Any, ...], List[int]]:
        """The orchestration's arguments of a request with tensors, and the addresses of
        its shipped outputs; its shipped inputs received. Buffers first, then the
        inputs: whatever fails later, the task's data messages are off the queue."""
        args: List[Any] = []
        inputs: List[int] = []
        outputs: List[int] = []
        for i, a in enumerate(req.args):
            if isinstance(a, tuple) and a[0] == "shipped":
                _, d, dtype, shape, nbytes = a
                arr, addr = self._pooled(i, shape, dtype, nbytes)
                if d != "out":
                    inputs.append(addr)
                if d != "in":
                    outputs.append(addr)
                args.append(arr)
            elif isinstance(a, tuple):
                _, d, dtype, shape, tid = a
                args.append(self._resident(tid, shape, dtype))
            else:
                args.append(a)
        if inputs:
            req.receive_inputs(inputs)
        return tuple(args), outputs

    def _one(self, req: Any, node: Any) -> None:
        args: Tuple[Any, ...]
        out_addrs: List[int]
        if req.scalars_only:
            args, out_addrs = req.args, []
        else:
            args, out_addrs = self._buffers(req)
        try:
            entry = self._entries[req.callable] if req.callable < len(self._entries) else None
            if entry is None or entry[0] != req.name:
                have = entry[0] if entry is not None else "nothing"
                raise RuntimeError(
                    f"rank 0 sent program {req.name!r} (handle {req.callable}) but this host registered {have!r} there: register the same DistributedPrograms in the same order on every rank"
                )
            if not req.scalars_only:
                for i, a in enumerate(req.args):
                    if isinstance(a, tuple) and a[0] == "resident":
                        r = args[i]
                        if tuple(r.shape) != tuple(a[3]) or r.dtype != np.dtype(a[2]):
                            raise ValueError(f"argument {i}: host tensor {a[4]:#x} is {r.dtype}{list(r.shape)} here, not {a[2]}{list(a[3])}")
            # The run and the answer in one native call (no Python report between
            # them): what DistributedWorker.run does, minus what a request makes
            # unnecessary — its arrays are shared by construction and its cfg is
            # already a fresh CallConfig (the one rank 0 sent), which the node
            # validates. An exception of the run is answered below.
            req.run(node, entry[1], entry[2], args, out_addrs)
        except Exception as e:  # the task's failure, reported to rank 0
            req.reply(None, _text(e), [])
        # Any other exception (SystemExit, KeyboardInterrupt), here or in _buffers,
        # propagates to host_serve, which answers the task and stops serving.


def _text(e: BaseException) -> str:
    s = str(e)
    return s if s else type(e).__name__

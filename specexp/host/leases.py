"""Host-wide leases on GPUs, CPU cores and ports, for jobs that share one machine.

Hydra's local launchers (``submitit_local``, joblib) start several jobs at once on one host
and give each of them every GPU and core - submitit's local executor even gives every job
the same ``CUDA_VISIBLE_DEVICES``. Two tensor-parallel servers on the same GPUs would fail,
or worse, measure each other; two CPU servers with a thread per core each run many times
slower than alone. A lease is an exclusive ``flock`` on a file named after the
resource in a directory every job of the host sees (``host.lease_dir``); the kernel drops it
when the holder exits, however it exits, so a crashed job never leaves a GPU or port taken.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from specexp.core.schemas.checks import ConfigError


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free now (another job may be told the same: lease it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class Lease:
    """Exclusive hold on some named resources of this host, until :meth:`release`."""

    def __init__(self, names: Sequence[str], fds: Sequence[int], paths: Sequence[Path]):
        self.names = list(names)
        self._fds, self._paths = list(fds), list(paths)

    @classmethod
    def joined(cls, leases: Sequence[Lease]) -> Lease:
        return cls(
            [n for lease in leases for n in lease.names],
            [fd for lease in leases for fd in lease._fds],
            [p for lease in leases for p in lease._paths],
        )

    def release(self) -> None:
        # Unlink while still holding the lock, so lease files do not pile up in lease_dir.
        for path, fd in zip(self._paths, self._fds, strict=True):
            path.unlink(missing_ok=True)
            os.close(fd)  # closing the descriptor drops the flock
        self._fds, self._paths = [], []


def try_lease(lease_dir: Path, names: Sequence[str], holder: str = "") -> Optional[Lease]:
    """All of ``names`` at once, or None (and nothing held) if any is taken. Each lease file
    says who holds it (this process's id and ``holder``), for those who find it taken."""
    lease_dir.mkdir(parents=True, exist_ok=True)
    held: list[Lease] = []
    for name in names:
        path = lease_dir / f"{name}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # A holder unlinks the file on release: a lock on an unlinked file guards nothing.
            if os.fstat(fd).st_ino != os.stat(path).st_ino:
                raise BlockingIOError
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            Lease.joined(held).release()
            return None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {holder}".encode())
        held.append(Lease([name], [fd], [path]))
    return Lease.joined(held)


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: a process, and what it holds it for."""

    pid: Optional[int]  # None: the file did not say (taken between its lock and its write)
    what: str

    def __str__(self) -> str:
        return f"{self.what or 'a job'} (pid {self.pid if self.pid is not None else 'unknown'})"


def holder_of(lease_dir: Path, name: str) -> Holder:
    try:
        text = (lease_dir / f"{name}.lock").read_text(errors="replace")
    except OSError:
        text = ""
    pid, _, what = text.partition(" ")
    return Holder(int(pid) if pid.isdigit() else None, what.strip())


def lease_port(
    lease_dir: Path, host: str, pick: Callable[[str], int], attempts: int = 50
) -> tuple[int, Lease]:
    """A free port that no other job of this host holds. ``pick`` asks the kernel for a free
    port, which another job may also have been told until its server binds it (SGLang binds
    only after loading the model, minutes later); the lease closes that window."""
    for _ in range(attempts):
        port = pick(host)
        lease = try_lease(lease_dir, [f"port-{port}"])
        if lease is not None:
            return port, lease
    raise RuntimeError(f"no free port on {host} after {attempts} tries (leases in {lease_dir})")


def command_output(
    command: list[str], timeout_s: float = 30, cwd: Optional[Path] = None
) -> Optional[str]:
    """What a command of this host prints when it succeeds in time; None when it fails,
    hangs (a wedged driver) or cannot start - a caller leaves the fact out, unguessed."""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def host_gpus(configured: Optional[Sequence[str]]) -> list[str]:
    """The GPUs this host lends to servers: ``host.gpus`` if set, else $CUDA_VISIBLE_DEVICES
    (Slurm sets it to the job's allocation), else every GPU nvidia-smi lists.

    An empty $CUDA_VISIBLE_DEVICES counts as unset: submitit's local executor sets it empty
    whenever ``gpus_per_node`` is unset."""
    if configured is not None:
        return [str(g) for g in configured]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        return [g.strip() for g in visible.split(",") if g.strip()]
    if shutil.which("nvidia-smi"):
        # A failing nvidia-smi (no driver loaded) prints its error on stdout: no GPUs.
        out = command_output(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"])
        return [line.strip() for line in (out or "").splitlines() if line.strip().isdigit()]
    return []


# What a server needs of each kind of device, for the error when a host cannot lend it.
_NEEDS = {
    "gpu": ("GPU(s) (engine.gpus)", "host.gpus to the devices to use"),
    "cpu": (
        "CPU core(s) (one per thread)",
        "fewer threads for the engine, or host.cpus to the cores to use",
    ),
}


def check_pool(pool: Sequence[str], count: int, kind: str = "gpu") -> None:
    if count > len(pool):
        need, fix = _NEEDS[kind]
        raise ConfigError(
            f"a server needs {count} {need} but this host lends {len(pool)}"
            f"{' (' + ','.join(pool) + ')' if pool else ''}: run on a node with enough, or set "
            f"{fix}"
        )


def lease_devices(
    lease_dir: Path,
    kind: str,
    pool: Sequence[str],
    count: int,
    wait_s: float,
    on_wait: Callable[[str], None] = lambda holders: None,
    poll_s: float = 1.0,
    holder: str = "",
) -> Lease:
    """``count`` devices (``kind`` "gpu" or "cpu" cores) of ``pool`` that no other job of
    this host holds, waiting up to ``wait_s`` for jobs holding them to finish (``on_wait``
    is told who holds them). A wait that only this process could end - it holds what is
    missing itself, and waits in its one thread - fails at once, naming what holds them."""
    check_pool(pool, count, kind)
    deadline = time.monotonic() + wait_s
    waiting = False
    while True:
        # Take free devices in pool order; if too few are free, give all back (no hold-and-
        # wait, so two jobs each holding half of what they need cannot block each other).
        held: list[Lease] = []
        taken: dict[str, Holder] = {}
        for device in pool:
            lease = try_lease(lease_dir, [f"{kind}-{device}"], holder)
            if lease is None:
                taken[device] = holder_of(lease_dir, f"{kind}-{device}")
                continue
            held.append(lease)
            if len(held) == count:
                return Lease.joined(held)
        for lease in held:
            lease.release()
        holders = "; ".join(f"{kind.upper()} {d}: {h}" for d, h in taken.items())
        own = [d for d, h in taken.items() if h.pid == os.getpid()]
        if len(pool) - len(own) < count:
            raise RuntimeError(
                f"{count} {kind.upper()}(s) of {','.join(pool)} wanted, and this process holds "
                f"{len(own)} of them itself ({holders}): waiting could never end. Its sweep "
                "keeps a server it no longer needs, or one job asks for more than the host "
                "lends beside another of its own"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{count} {kind.upper()}(s) of {','.join(pool)} not free after {wait_s:.0f} s "
                f"(host.lease_wait_s); held by {holders} (leases in {lease_dir})"
            )
        if not waiting:
            on_wait(holders)
            waiting = True
        time.sleep(poll_s)


class _CoresHandle(Lease):
    """One server's share of its process's cores: released with the server."""

    def __init__(self, owner: ProcessCores):
        super().__init__([], [], [])
        self._owner: Optional[ProcessCores] = owner

    def release(self) -> None:
        if self._owner is not None:
            self._owner.give_back()
            self._owner = None


class ProcessCores:
    """The CPU cores this process holds for its CPU servers. The servers of one process take
    turns (a sweep's shared servers, an A/B's two arms), so they share these cores; the cores
    go back to the host when the last of those servers stops."""

    def __init__(self) -> None:
        self.lease: Optional[Lease] = None
        self.servers = 0

    def take(
        self,
        lease_dir: Path,
        pool: Sequence[str],
        count: int,
        wait_s: float,
        on_wait: Callable[[str], None] = lambda holders: None,
        holder: str = "",
    ) -> tuple[list[str], Lease]:
        """``count`` cores for one more server, and the handle its stop releases."""
        held = list(self.lease.names) if self.lease else []
        if len(held) < count:
            check_pool(pool, count, "cpu")
            free = [c for c in pool if f"cpu-{c}" not in held]
            more = lease_devices(
                lease_dir, "cpu", free, count - len(held), wait_s, on_wait, holder=holder
            )
            self.lease = Lease.joined([self.lease, more]) if self.lease else more
        self.servers += 1
        assert self.lease is not None
        return [name.removeprefix("cpu-") for name in self.lease.names[:count]], _CoresHandle(self)

    def give_back(self) -> None:
        self.servers -= 1
        if self.servers == 0 and self.lease is not None:
            self.lease.release()
            self.lease = None


# This process's cores, shared by its CPU servers.
PROCESS_CORES = ProcessCores()


@contextlib.contextmanager
def away_from(cores: Optional[Sequence[str]]) -> Iterator[Optional[list[str]]]:
    """Every thread of this process kept off ``cores`` (those a CPU server was leased)
    while the block runs, on the rest of its affinity: the client then never takes the
    server's core from it (Linux otherwise moves it there now and then - a run's decode
    measured up to 35% slower). Yields the cores the client runs on; None, changing
    nothing, when the server has no leased cores or they leave none over."""
    mine = os.sched_getaffinity(0)
    rest = mine - {int(c) for c in cores or ()}
    if not cores or not rest or rest == mine:
        yield None
        return
    threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    before: dict[int, set[int]] = {}
    for tid in threads:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, rest)
    try:
        yield [str(c) for c in sorted(rest)]
    finally:
        for tid, cpus in before.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)


def gpu_ids(lease: Lease) -> str:
    """The leased GPUs as a CUDA_VISIBLE_DEVICES value."""
    return ",".join(name.removeprefix("gpu-") for name in lease.names)

"""Host-wide leases on GPUs and ports, for jobs that share one machine.

Hydra's local launchers (``submitit_local``, joblib) start several jobs at once on one host
and give each of them every GPU - submitit's local executor even gives every job the same
``CUDA_VISIBLE_DEVICES``. Two tensor-parallel servers on the same GPUs would fail, or
worse, measure each other. A lease is an exclusive ``flock`` on a file named after the
resource in a directory every job of the host sees (``host.lease_dir``); the kernel drops it
when the holder exits, however it exits, so a crashed job never leaves a GPU or port taken.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from specexp.schemas import ConfigError


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


def try_lease(lease_dir: Path, names: Sequence[str]) -> Optional[Lease]:
    """All of ``names`` at once, or None (and nothing held) if any is taken."""
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
        held.append(Lease([name], [fd], [path]))
    return Lease.joined(held)


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
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return []


def check_pool(pool: Sequence[str], count: int) -> None:
    if count > len(pool):
        raise ConfigError(
            f"a server needs {count} GPU(s) (engine.gpus) but this host lends {len(pool)}"
            f"{' (' + ','.join(pool) + ')' if pool else ''}: run on a node with enough GPUs, or set "
            f"host.gpus to the devices to use"
        )


def lease_gpus(
    lease_dir: Path,
    pool: Sequence[str],
    count: int,
    wait_s: float,
    on_wait: Callable[[], None] = lambda: None,
    poll_s: float = 1.0,
) -> Lease:
    """``count`` GPUs of ``pool`` that no other job of this host holds, waiting up to
    ``wait_s`` for jobs holding them to finish."""
    check_pool(pool, count)
    deadline = time.monotonic() + wait_s
    waiting = False
    while True:
        # Take free GPUs in pool order; if too few are free, give all back (no hold-and-wait,
        # so two jobs each holding half of what they need cannot block each other).
        held: list[Lease] = []
        for gpu in pool:
            lease = try_lease(lease_dir, [f"gpu-{gpu}"])
            if lease is not None:
                held.append(lease)
                if len(held) == count:
                    return Lease.joined(held)
        for lease in held:
            lease.release()
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{count} GPU(s) of {','.join(pool)} not free after {wait_s:.0f} s "
                f"(host.gpu_wait_s); other jobs hold them (leases in {lease_dir})"
            )
        if not waiting:
            on_wait()
            waiting = True
        time.sleep(poll_s)


def gpu_ids(lease: Lease) -> str:
    """The leased GPUs as a CUDA_VISIBLE_DEVICES value."""
    return ",".join(name.removeprefix("gpu-") for name in lease.names)

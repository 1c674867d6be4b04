"""GPU leases within one process: a wait that only this process could end - its own sweep's
server holds the GPU - fails at once with the holder named, and a job that starts its own
server first stops the sweep's shared one (reference_gpu waited 8.5 minutes on one H100 for
the GPU its own shared server held)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from specexp.host.leases import holder_of, lease_devices
from specexp.run import measure


def test_a_gpu_held_by_this_process_is_refused_at_once_with_its_holder_named(tmp_path: Path):
    held = lease_devices(tmp_path, "gpu", ["0"], 1, wait_s=5, holder="the server of cpu_case=a")
    assert holder_of(tmp_path, "gpu-0").pid == os.getpid()
    started = time.monotonic()
    waited: list[str] = []
    with pytest.raises(RuntimeError, match="waiting could never end") as refused:
        lease_devices(tmp_path, "gpu", ["0"], 1, wait_s=86400, on_wait=waited.append)
    assert time.monotonic() - started < 5 and not waited
    assert f"GPU 0: the server of cpu_case=a (pid {os.getpid()})" in str(refused.value)
    held.release()
    lease_devices(tmp_path, "gpu", ["0"], 1, wait_s=1).release()


def test_one_gpu_of_two_held_here_leaves_the_other_to_lease(tmp_path: Path):
    held = lease_devices(tmp_path, "gpu", ["0", "1"], 1, wait_s=5)
    other = lease_devices(tmp_path, "gpu", ["0", "1"], 1, wait_s=5)
    assert held.names == ["gpu-0"] and other.names == ["gpu-1"]
    with pytest.raises(RuntimeError, match="holds 2 of them itself"):
        lease_devices(tmp_path, "gpu", ["0", "1"], 1, wait_s=86400)
    held.release()
    other.release()


def test_a_job_starting_its_own_server_stops_the_sweeps_shared_one_first(monkeypatch):
    """The order that deadlocked: a shared server (jobs run whole) kept in the pool, then a
    comparison's arm starting a server of its own, which leases the same GPU."""
    calls: list[str] = []
    monkeypatch.setattr(measure.POOL, "close", lambda: calls.append("pool closed"))

    class Server:
        def start(self) -> None:
            calls.append("own server started")

        def wait_ready(self, timeout_s: float) -> float:
            return 0.0

    def new_server(job, log_path, emit):
        calls.append("own server leased")
        return Server()

    monkeypatch.setattr(measure, "new_server", new_server)
    monkeypatch.setattr(measure, "_starting", lambda server, label, job, emit: server)
    job = SimpleNamespace(config=SimpleNamespace(engine=SimpleNamespace(ready_timeout_s=1)))
    session = SimpleNamespace(job=job, emit=None, server=None, log_path=Path("server.log"))
    measure._server_for(session, "", shared=False)
    assert calls == ["pool closed", "own server leased", "own server started"]

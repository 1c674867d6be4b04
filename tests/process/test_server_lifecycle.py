"""Server lifecycle against real processes: llama.cpp, and plain programs that misbehave."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import psutil
import pytest

from specexp.engines.records import LaunchSpec
from specexp.host.leases import free_port
from specexp.serving.server import ServerError, ServerProcess, live_group_members
from tests.conftest import llamacpp_launch


def group_alive(pgid: int) -> bool:
    return bool(live_group_members(pgid))


@pytest.mark.load_tolerant
def test_llamacpp_starts_serves_health_and_stops(tmp_path):
    launch, port = llamacpp_launch()
    server = ServerProcess(launch, "127.0.0.1", port, "/health", tmp_path / "server.log")
    with server:
        ready = server.wait_ready(timeout_s=60)
        assert 0 < ready < 60
        assert server.alive()
        pid = server.process.pid
    assert not server.alive()
    assert not group_alive(pid)
    log = (tmp_path / "server.log").read_text()
    assert f"listening on http://127.0.0.1:{port}" in log
    assert "cleaning up before exit" in log  # SIGTERM let it shut down cleanly


@pytest.mark.load_tolerant
def test_early_exit_is_reported_at_once_with_the_reason(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"this is not a gguf file")
    launch, port = llamacpp_launch("model.generate=null", f"model.path={broken}")
    server = ServerProcess(launch, "127.0.0.1", port, "/health", tmp_path / "server.log")
    started = time.monotonic()
    with server, pytest.raises(ServerError) as error:
        server.wait_ready(timeout_s=120)
    assert time.monotonic() - started < 20  # not the readiness timeout
    assert "exited with code" in str(error.value)
    assert "model" in error.value.reason.lower()
    assert error.value.log_tail


@pytest.mark.no_engine_server
def test_python_exception_line_is_the_reason(tmp_path):
    code = (
        "import sys; print('loading weights'); "
        "raise AttributeError(\"'KimiK25ForConditionalGeneration' object has no attribute "
        "'set_eagle3_layers_to_capture'\")"
    )
    server = ServerProcess(
        LaunchSpec([sys.executable, "-c", code], {}),
        "127.0.0.1",
        free_port(),
        "/health",
        tmp_path / "server.log",
    )
    with server, pytest.raises(ServerError) as error:
        server.wait_ready(timeout_s=60)
    assert error.value.reason.startswith("AttributeError: 'KimiK25ForConditionalGeneration'")


@pytest.mark.no_engine_server
def test_readiness_timeout_then_the_whole_group_is_stopped(tmp_path):
    # A "server" that never answers and has a child of its own.
    code = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"
    server = ServerProcess(
        LaunchSpec([sys.executable, "-c", code], {}),
        "127.0.0.1",
        free_port(),
        "/health",
        tmp_path / "server.log",
    )
    server.start()
    pgid = server.process.pid
    with pytest.raises(ServerError, match=r"not ready after 1 s"):
        server.wait_ready(timeout_s=1)
    assert group_alive(pgid)
    server.stop(grace_s=2)
    assert not group_alive(pgid)


@pytest.mark.no_engine_server
def test_port_in_use_is_refused_before_launch(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ServerProcess(
            LaunchSpec([sys.executable, "-c", "pass"], {}),
            "127.0.0.1",
            port,
            "/health",
            tmp_path / "server.log",
        )
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            server.start()
        assert server.process is None


# A starter with threads of its own, as specexp's command is: as each exits, the kernel sends
# the server its parent-death signal again.
_STARTER = """
import json, pathlib, signal, sys, threading, time
from specexp.engines.records import LaunchSpec
from specexp.serving.server import ServerProcess
argv, env, death_signal = json.loads(sys.argv[1])
launch = LaunchSpec(argv, env, signal.Signals(death_signal))
for _ in range(4):
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
server = ServerProcess(launch, "127.0.0.1", int(sys.argv[2]), "/health", pathlib.Path(sys.argv[3]))
server.start()
server.wait_ready(timeout_s=60)
print(server.process.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.load_tolerant
def test_llamacpp_whose_starter_is_killed_goes_without_its_second_interrupt_exit(tmp_path):
    """CI, 6 Dec: a sweep killed by SIGKILL left llama-server three SIGTERMs (one per exiting
    thread); from the second on it calls exit() in its signal handler, which crashed it (or,
    once, left it hung past its killed run). It must go at once, through one signal only."""
    launch, port = llamacpp_launch()
    log = tmp_path / "server.log"
    spec = json.dumps([launch.argv, launch.env, int(launch.parent_death_signal)])
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER, spec, str(port), str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    server = psutil.Process(int(starter.stdout.readline()))
    starter.kill()
    starter.wait()
    server.wait(timeout=30)
    assert "second interrupt" not in log.read_text()

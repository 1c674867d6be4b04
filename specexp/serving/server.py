"""Server lifecycle: launch in its own process group, wait for readiness, stop cleanly.

The server writes to a log file, never to a pipe (a full pipe would stall it). Readiness is
polled over HTTP while the process is watched, so a server that dies at start-up is reported
at once, with the line that says why and the end of its log, not at the readiness timeout.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, Optional, Sequence

import psutil

from specexp.core.durable import write_atomic
from specexp.engines.http import is_local, urlopen
from specexp.engines.records import LaunchSpec
from specexp.host.leases import Lease

# How long a server that never became ready gets to exit on SIGTERM: it has served nothing to
# flush, and vLLM's API server ignores SIGTERM until its engine core is up (15 s at Ctrl-C).
STARTING_GRACE_S = 2.0

_ERROR_LINE = re.compile(r"(\w+(Error|Exception)\b.*|error: .*|.*\bfailed\b.*)", re.IGNORECASE)


class ServerError(RuntimeError):
    """The server could not be brought up; carries the reason and the log's tail."""

    def __init__(self, message: str, reason: str = "", log_tail: str = ""):
        super().__init__(message)
        self.reason = reason
        self.log_tail = log_tail


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def live_group_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that still run (zombies waiting to be reaped do not count)."""
    members = []
    for process in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def reason_from_log(log: str) -> str:
    """The most telling line of a failed server's log: the last exception or error line."""
    candidates = [line.strip() for line in log.splitlines() if _ERROR_LINE.search(line)]
    return candidates[-1] if candidates else (log.strip().splitlines() or [""])[-1]


def die_with_parent(
    parent: Optional[int] = None, death_signal: signal.Signals = signal.SIGTERM
) -> None:
    """In the server, before exec (Linux): send it ``death_signal`` when the process that
    started it dies, even by SIGKILL - a job killed at its time limit or cancelled by its
    launcher must not leave a server holding the GPUs. Elsewhere a no-op. ``parent``, the
    starting process's id: one that died before the signal was set (killed while the server
    started) would never send it, so the server does not start at all."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, death_signal)
    except (OSError, AttributeError):
        pass
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def before_exec(
    cores: Optional[Sequence[str]],
    parent: Optional[int] = None,
    death_signal: signal.Signals = signal.SIGTERM,
) -> None:
    """In the server, before exec: :func:`die_with_parent`, and the server, with every
    process and thread it starts, kept on its leased cores."""
    die_with_parent(parent, death_signal)
    if cores:
        os.sched_setaffinity(0, [int(c) for c in cores])


_PR_SET_PDEATHSIG = 1


def healthy(url: str, headers: Optional[dict[str, str]] = None) -> bool:
    """The health endpoint answers 200 (not listening yet, or 503 while loading: False)."""
    try:
        request = urllib.request.Request(url, headers=headers or {})
        with urlopen(request, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


class ServerProcess:
    """One launched inference server. Use as a context manager: it is always stopped."""

    def __init__(
        self,
        launch: LaunchSpec,
        host: str,
        port: int,
        health_path: str,
        log_path: Path,
        leases: Sequence[Lease] = (),
        cores: Optional[Sequence[str]] = None,
    ):
        self.launch = launch
        self.leases = list(leases)  # its port, GPUs and cores, held until the server is gone
        self.cores = list(cores) if cores else None  # its CPU affinity
        self.base_url = f"http://{host}:{port}"
        self.host, self.port = host, port
        self.health_path = health_path
        self.log_path = log_path
        self.process: Optional[subprocess.Popen] = None
        # Wall-clock seconds (epoch) of start and stop, to line a server up with others' and
        # with GPU monitoring.
        self.started_at: Optional[float] = None
        self.stopped_at: Optional[float] = None
        self.ready = False

    def start(self) -> None:
        if port_in_use(self.host, self.port):
            raise ServerError(
                f"port {self.port} on {self.host} is already in use; choose another "
                f"engine.port or 0 for a free one",
                reason=f"port {self.port} in use",
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(
                self.launch.argv,
                env={**os.environ, **self.launch.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group, so stop() reaches every child
                preexec_fn=functools.partial(
                    before_exec, self.cores, os.getpid(), self.launch.parent_death_signal
                ),
            )
            self.started_at = time.time()
        except OSError as exc:
            raise ServerError(
                f"could not start {self.launch.argv[0]}: {exc}", reason=str(exc)
            ) from exc
        finally:
            log.close()

    def wait_ready(self, timeout_s: float, poll_s: float = 0.25) -> float:
        """Block until the health endpoint answers 200; return the seconds it took."""
        assert self.process is not None, "start() first"
        started = time.monotonic()
        url = self.base_url + self.health_path
        while True:
            code = self.process.poll()
            if code is not None:
                log = tail(self.log_path)
                reason = reason_from_log(log)
                raise ServerError(
                    f"server exited with code {code} during start-up: {reason}",
                    reason=reason,
                    log_tail=log,
                )
            # A probe can wait for a server that is still binding: ready only if in time.
            if healthy(url) and time.monotonic() - started <= timeout_s:
                self.ready = True
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                log = tail(self.log_path)
                raise ServerError(
                    f"server not ready after {timeout_s:.0f} s (engine.ready_timeout_s)",
                    reason="readiness timeout",
                    log_tail=log,
                )
            time.sleep(poll_s)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ended(self) -> Optional[str]:
        """How the server's process ended, once it has (its exit code, or the signal that
        killed it); None while it runs, or for a server specexp did not start."""
        code = self.process.poll() if self.process else None
        if code is None:
            return None
        if code >= 0:
            return f"exited with code {code}"
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"

    def answers(self) -> bool:
        return healthy(self.base_url + self.health_path)

    def death(self, during: str, request_error: str = "") -> Optional[ServerError]:
        """The error for a server that has exited or stopped answering ``during`` a run: how
        it ended and its log's telling line, or - alive but silent - the request's own error
        (``request_error``); with the log's tail. None while it runs and answers."""
        ended = self.ended()
        if ended is None and self.answers():
            return None
        log = tail(self.log_path)
        if ended is None:
            how, reason = "stopped answering, its health endpoint too,", request_error
        else:
            how, reason = ended, reason_from_log(log)
        name = Path(self.launch.argv[0]).name if self.launch.argv else "the server"
        pid = f" (pid {self.process.pid})" if self.process else ""
        return ServerError(
            f"{name}{pid} {how} {during}: {reason}",
            reason=f"{how} {during}: {reason}",
            log_tail=log,
        )

    def server_pid(self) -> Optional[int]:
        """The server's own process, for telemetry to count its CPU as the server's."""
        return self.process.pid if self.process else None

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to the whole group, then SIGKILL what is left after ``grace_s`` (at most
        STARTING_GRACE_S for a server that never became ready); then give back the port and
        GPUs."""
        try:
            self._stop_group(grace_s if self.ready else min(grace_s, STARTING_GRACE_S))
        finally:
            self.stopped_at = time.time()
            for lease in self.leases:
                lease.release()
            self.leases = []

    def _stop_group(self, grace_s: float) -> None:
        if self.process is None:
            return
        pgid = self.process.pid
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
                os.killpg(pgid, signal.SIGCONT)  # a stopped (SIGSTOP) server must wake to handle it
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            # The leader may exit before its children (tensor-parallel workers): wait for the group.
            while live_group_members(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not live_group_members(pgid):
                break
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


class ServerPool:
    """Keeps the last server running so that the next job of a sweep with the identical server
    configuration reuses it instead of launching again. One server at a time."""

    def __init__(self) -> None:
        self.key: Optional[str] = None
        self.server: Optional[ServerProcess] = None

    def acquire(
        self, key: str, make_server: Callable[[], ServerProcess], timeout_s: float
    ) -> tuple[ServerProcess, bool, float]:
        """(running server, reused?, seconds to ready) - a new server is made only if needed,
        after the previous one has stopped and given back its GPUs."""
        if self.server is not None and self.key == key and self.server.alive():
            return self.server, True, 0.0
        self.close()
        server = make_server()
        server.start()
        try:
            ready_s = server.wait_ready(timeout_s)
        except BaseException:
            server.stop()
            raise
        self.key, self.server = key, server
        return server, False, ready_s

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.key, self.server = None, None


# Shared by the jobs of one multirun process (Hydra's basic launcher runs them in-process).
POOL = ServerPool()


class ExternalServer(ServerProcess):
    """A running server specexp did not start (``engine.url``): measured, never started or
    stopped; its log says so."""

    def __init__(self, url: str, health_path: str, log_path: Path, headers: dict[str, str]):
        super().__init__(LaunchSpec([], {}), "", 0, health_path, log_path)
        self.base_url = url.rstrip("/")
        self.headers = headers

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(
            self.log_path, f"{self.base_url} was not started by specexp: no log of its own here\n"
        )
        self.started_at = time.time()

    def wait_ready(self, timeout_s: float, poll_s: float = 0.25) -> float:
        started = time.monotonic()
        url = self.base_url + self.health_path
        while not healthy(url, self.headers):
            if time.monotonic() - started > timeout_s:
                raise ServerError(
                    f"{url} did not answer 200 within {timeout_s:.0f} s (engine.ready_timeout_s):"
                    " is the server up, and engine.api_key_env set if it wants a key?",
                    reason="endpoint not ready",
                )
            time.sleep(poll_s)
        return time.monotonic() - started

    def alive(self) -> bool:
        return True

    def answers(self) -> bool:
        return healthy(self.base_url + self.health_path, self.headers)

    def server_pid(self) -> Optional[int]:
        """The process listening on the URL's port when the server runs on this host (its
        CPU is then the server's, not other load); None for a remote one, or one this
        process may not see."""
        url = urllib.parse.urlsplit(self.base_url)
        if not url.hostname or not is_local(url.hostname):
            return None
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            connections = psutil.net_connections(kind="tcp")
        except psutil.Error:
            return None
        for connection in connections:
            if (
                connection.status == psutil.CONN_LISTEN
                and connection.laddr
                and connection.laddr.port == port
                and connection.pid
            ):
                return connection.pid
        return None

    def stop(self, grace_s: float = 15.0) -> None:
        self.stopped_at = time.time()

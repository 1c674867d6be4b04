"""Which process owns a run: this host, its pid and its start time (a pid alone is reused).
A run left RUNNING whose owner on this host is gone (killed with SIGKILL, the machine
restarted) was abandoned; the next specexp command ends it."""

from __future__ import annotations

import socket

import psutil


def this_process() -> str:
    """This process as a run's owner: ``HOST PID START``."""
    me = psutil.Process()
    return f"{socket.gethostname()} {me.pid} {me.create_time():.2f}"


def host_prefix() -> str:
    """The prefix every owner on this host starts with (for a search)."""
    return f"{socket.gethostname()} "


def gone(owner: str) -> bool:
    """``owner`` (see :func:`this_process`) was a process of this host that no longer runs.
    Owners on other hosts are never called gone: they cannot be seen from here."""
    host, pid, started = owner.rsplit(" ", 2)
    if host != socket.gethostname():
        return False
    try:
        return f"{psutil.Process(int(pid)).create_time():.2f}" != started
    except psutil.NoSuchProcess:
        return True

"""Ctrl-C and SIGTERM as KeyboardInterrupt, remembered. Raised from a signal handler, the
interrupt lands wherever the main thread is; code that turns whatever it catches into an
error of its own (a config library composing the next job, a transport callback) can make
it something else, and a sweep that stopped for a signal would then end its runs FAILED.
What was received is kept, so the code that ends runs asks it rather than the exception.
A call that must not be cut in half runs :func:`deferred`: the interrupt waits for it."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator, Optional

_received: list[int] = []
_deferring: list[bool] = []  # one entry per open deferred() block
_pending: list[int] = []  # a signal received inside one, raised when it closes


def raise_interrupt(signum: int, frame: object = None) -> None:
    """The handler for both signals: remember it, then unwind as Ctrl-C does - inside a
    :func:`deferred` block once it closes, unless a second signal comes first."""
    _received.append(signum)
    if _deferring and not _pending:
        _pending.append(signum)
        return
    _pending.clear()
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def deferred() -> Iterator[None]:
    """A short call not to be cut in half: a store's write, which an interrupt inside left
    with its session broken, so that the run's own end (KILLED) failed over to a journal and
    the store kept the run RUNNING. Ctrl-C or SIGTERM during it is raised when it returns; a
    second one at once (a store that hangs)."""
    _deferring.append(True)
    try:
        yield
    finally:
        _deferring.pop()
        if _pending and not _deferring:
            raise KeyboardInterrupt(f"signal {_pending.pop()}")


def install() -> None:
    # Python's default SIGTERM ends the process without unwinding, which would orphan the
    # server.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, raise_interrupt)


def received() -> Optional[signal.Signals]:
    """The last interrupting signal this process received, if any."""
    return signal.Signals(_received[-1]) if _received else None


def remember(signum: int) -> KeyboardInterrupt:
    """For handlers that cancel work instead of raising (the client's event loop)."""
    _received.append(signum)
    return KeyboardInterrupt(f"signal {signum}")


def stop_if_received() -> None:
    """Between units of work: an interrupt that was swallowed on its way up still stops."""
    if _received:
        raise KeyboardInterrupt(f"signal {_received[-1]}")

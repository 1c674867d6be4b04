"""Ctrl-C and SIGTERM as KeyboardInterrupt, remembered. Raised from a signal handler, the
interrupt lands wherever the main thread is; code that turns whatever it catches into an
error of its own (a config library composing the next job, a transport callback) can make
it something else, and a sweep that stopped for a signal would then end its runs FAILED.
What was received is kept, so the code that ends runs asks it rather than the exception."""

from __future__ import annotations

import signal
from typing import Optional

_received: list[int] = []


def raise_interrupt(signum: int, frame: object = None) -> None:
    """The handler for both signals: remember it, then unwind as Ctrl-C does."""
    _received.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


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

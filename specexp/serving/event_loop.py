"""The client's event loop: uvloop, its work cancelled by SIGINT and SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from typing import Any, Coroutine, TypeVar

import uvloop

from specexp.host import interrupt

T = TypeVar("T")


def run_async(work: Coroutine[Any, Any, T]) -> T:
    """Run the client's work on uvloop: libuv's loop wakes and dispatches reads at a fraction
    of asyncio's cost per event, which is what keeps timestamps true at hundreds of streams.
    SIGINT and SIGTERM cancel the work and are raised as KeyboardInterrupt once it has
    unwound: raised from the signal handler, the interrupt could land inside one of the loop's
    callbacks, which would swallow it (uvloop logs it) and let the run go on to its end."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_cancelled_by_signal(work))


async def _cancelled_by_signal(work: Coroutine[Any, Any, T]) -> T:
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.getsignal(signum) for signum in signals}
    received: list[int] = []

    def cancel(signum: int) -> None:
        received.append(signum)
        if task is not None:
            task.cancel()

    try:
        for signum in signals:
            loop.add_signal_handler(signum, cancel, signum)
    except (ValueError, RuntimeError):  # not the main thread (a client worker process's pool)
        return await work
    try:
        return await work
    except asyncio.CancelledError:
        if received:
            raise interrupt.remember(received[-1]) from None
        raise
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
            signal.signal(signum, previous[signum])

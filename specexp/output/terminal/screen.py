"""The terminal itself: the console every report prints to (its lines also appended to the
log files open), a live status line, and the one-line stops (a usage error, an interrupt)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Optional

from rich.console import Console
from rich.markup import escape

from specexp.core.redaction import redact_text

# Tables are drawn to fit this many columns where the terminal's width is not known (logs,
# pipes), and at most this many in a terminal: wider ones fold their cells, never a figure.
WIDTH = 100


class _Console(Console):
    """The terminal, whose printed lines also go, plain, to the log files open (a job's
    ``specexp.log``); live displays (progress, status) stay on the terminal."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.logs: list[Console] = []

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*objects, **kwargs)
        for log in self.logs:
            log.print(*objects, **kwargs)

    def log_only(self, text: str) -> None:
        """A line for the log files alone (the terminal shows it live instead)."""
        for log in self.logs:
            log.print(text)


# soft_wrap: long lines (commands, paths) stay whole instead of being wrapped mid-word.
console = _Console(
    highlight=False,
    soft_wrap=True,
    width=min(WIDTH, os.get_terminal_size().columns) if sys.stdout.isatty() else WIDTH,
)


class _LogFile:
    """A log file that stops taking lines at its first write error (a full disk): the job
    goes on, and the terminal has said each line."""

    def __init__(self, path: Path):
        self.file: Optional[IO[str]] = path.open("a", encoding="utf-8")

    def _try(self, call: Callable[[IO[str]], Any]) -> None:
        if self.file is not None:
            try:
                call(self.file)
            except OSError:
                broken, self.file = self.file, None
                with contextlib.suppress(OSError):
                    broken.close()

    def write(self, text: str) -> int:
        self._try(lambda file: file.write(text))
        return len(text)

    def flush(self) -> None:
        self._try(lambda file: file.flush())

    def close(self) -> None:
        self._try(lambda file: file.close())


@contextlib.contextmanager
def logged_to(path: Path) -> Iterator[None]:
    """What the console prints, and tracebacks (:func:`log_traceback`), also appended to
    ``path`` while the context lasts (while its disk takes them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    file = _LogFile(path)
    log = Console(file=file, width=WIDTH, no_color=True, highlight=False, soft_wrap=True)  # type: ignore[arg-type]
    console.logs.append(log)
    try:
        yield
    finally:
        console.logs.remove(log)
        file.close()


def log_traceback() -> None:
    """The exception being handled, with its traceback, into the log files (the terminal
    gets one line for it where it is handled)."""
    console.log_only(redact_text(traceback.format_exc().rstrip()))


def print_stopped(what: str, why: str) -> None:
    """Why a command stopped before it ran (a usage error, a refused config), one line."""
    console.print(f"[red]{what}:[/] {escape(why)}")


def interrupted(signum: signal.Signals) -> int:
    """Every handler on the way up has cleaned up: one line, and the shell's exit status."""
    console.print(
        f"[yellow]interrupted ({signum.name}):[/] every server specexp "
        "started is stopped and open runs are ended as KILLED; what was measured is kept"
    )
    return 128 + signum


@contextlib.contextmanager
def status(message: str) -> Iterator[None]:
    with console.status(message):
        yield

"""Writes that survive a kill, a full disk or an I/O error: a file is replaced whole (a
temporary file beside it, synced, then renamed over it) or not at all, and lines are appended
whole or not at all. The one place specexp's own files are written; a reader of appended lines
skips a line cut short (a machine that lost power mid-write) and says so."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Union


def _sync_directory(directory: Path) -> None:
    """A rename is durable once its directory is synced."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _mode(path: Path) -> int:
    """The file's mode as it is, or for a new file as open() would make it (the umask)."""
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_atomic(path: Path, data: Union[str, bytes]) -> None:
    """Replace ``path`` with ``data``: readers see the old file or the new one, never a part;
    a failure (ENOSPC, EIO, a kill) leaves the old one as it was and no temporary file."""
    payload = data.encode() if isinstance(data, str) else data
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _mode(path))
        with os.fdopen(fd, "wb") as out:
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def append_whole(path: Path, lines: Iterable[str]) -> None:
    """Append ``lines`` (each ending in a newline) whole or not at all: a write that fails
    part-way is cut back off, so the file holds only complete lines."""
    payload = "".join(lines).encode()
    if not payload:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        before = os.fstat(fd).st_size
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.ftruncate(fd, before)
            raise
    finally:
        os.close(fd)


@dataclass
class JsonLines:
    """The records of a JSON-lines file, and the line cut short at its end, if any."""

    records: list[Any] = field(default_factory=list)
    torn: str = ""  # the torn last line's start, as read

    def describe(self, path: Path) -> str:
        torn = (
            f"; its last line was cut short ({self.torn[:40]!r}...), skipped" if self.torn else ""
        )
        return f"{path}: {len(self.records)} record(s){torn}"


def read_json_lines(path: Path) -> JsonLines:
    """Every whole line of ``path``; a last line that is not JSON (a write cut short) is
    skipped and kept in ``torn``. A bad line anywhere else is an error: that is no cut."""
    read = JsonLines()
    lines = [line for line in path.read_text(errors="replace").split("\n") if line.strip()]
    for number, line in enumerate(lines, 1):
        try:
            read.records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise ValueError(f"{path}:{number}: not a JSON line") from None
            read.torn = line
    return read

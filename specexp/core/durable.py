"""Writes that survive a kill, a full disk or an I/O error: a file is replaced whole (a
temporary file beside it, synced, then renamed over it) or not at all, and lines are appended
whole or not at all. The one place specexp's own files are written; a reader of appended lines
skips a line cut short (a machine that lost power mid-write) and says so.

A job sets space aside on its directory's filesystem when it opens (:func:`reserve_space`):
the first write that finds the disk full gives it back and is made in it - what was measured
is kept - then raises :class:`DiskFull`, which ends the job; closing it (its failure, its
run's end, a journal) writes in what is left of it."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Union

# What a job sets aside: room for the write that finds the disk full and for closing the
# job after it (its journal rewritten whole a few times, the store's last writes).
RESERVE_BYTES = 1 << 20
RESERVE_FILE = ".specexp-reserve"
_FULL = (errno.ENOSPC, errno.EDQUOT)
_reserves: set[Path] = set()


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    return f"{count / 1024:.1f} KiB" if count < 1 << 20 else f"{count / (1 << 20):.1f} MiB"


def _free(directory: Path) -> int:
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


class DiskFull(OSError):
    """A write the disk had no room for, in one line: the file, the space it needed and the
    space there was, and whether it was made in the space the job set aside."""

    def __init__(self, path: Path, needed: int, free: int, kept: bool):
        super().__init__(
            errno.ENOSPC,
            f"disk full: {path} needed {_size(needed)}, {_size(free)} free on its filesystem; "
            + ("written in the space the job set aside" if kept else "not written"),
        )

    def __str__(self) -> str:
        return str(self.strerror)


def reserve_space(directory: Path) -> None:
    """Set :data:`RESERVE_BYTES` aside on ``directory``'s filesystem, for the first write
    that finds it full (a disk already full, or a file-size limit below it: nothing set
    aside; the writes that fail say so)."""
    path = directory / RESERVE_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        path.unlink(missing_ok=True)
        return
    finally:
        os.close(fd)
    _reserves.add(path)


def release_space(directory: Path) -> None:
    """The space ``directory``'s job set aside given back (the job is closed)."""
    path = directory / RESERVE_FILE
    _reserves.discard(path)
    path.unlink(missing_ok=True)


def _release_on(device: int) -> bool:
    """Every reserve on ``device`` given back; whether there was one."""
    held = [p for p in _reserves if p.exists() and p.stat().st_dev == device]
    for path in held:
        release_space(path.parent)
    return bool(held)


def _with_room(path: Path, needed: int, write: Callable[[], None]) -> None:
    """``write()``; when the disk is full, made again in the space set aside on it (if any),
    then :class:`DiskFull` raised either way: the job ends at its first full disk."""
    try:
        write()
        return
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        free, cause = _free(path.parent), exc
    if _release_on(os.stat(path.parent).st_dev):
        try:
            write()
        except OSError as again:
            if again.errno not in _FULL:
                raise
            cause = again
        else:
            raise DiskFull(path, needed, free, kept=True) from cause
    raise DiskFull(path, needed, free, kept=False) from cause


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
    _with_room(path, len(payload), lambda: _replace(path, payload))


def _replace(path: Path, payload: bytes) -> None:
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
    if payload:
        _with_room(path, len(payload), lambda: _append(path, payload))


def _append(path: Path, payload: bytes) -> None:
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

"""A failure as the user sees it: one line on the terminal, the traceback in the job's log
(``specexp.log``, Hydra's log file in the output directory), and an exit status that says
which kind of failure it was."""

from __future__ import annotations

import errno
import logging
import traceback

from specexp.core.redaction import redact_text

# Exit statuses (sysexits.h where one fits; 2 is a usage error, 128+N a signal).
RUN_FAILED = 1  # a job's run failed (its server, its requests); its record says why
STORE_DOWN = 69  # EX_UNAVAILABLE: the tracking store could not be reached, nothing launched
BUG = 70  # EX_SOFTWARE: an error specexp did not expect
DISK = 74  # EX_IOERR: specexp's own files could not be written (disk full, I/O error)
# EX_TEMPFAIL: a sweep's report or a job's record is in a journal, not in the store yet:
# `specexp upload SWEEP_DIR` (the command printed last) puts it there.
NOT_IN_STORE = 75

# Errors of the disk under specexp's files, not of its logic (EFBIG: a file-size limit).
_DISK_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EROFS, errno.EFBIG)

_log = logging.getLogger("specexp.failure")


class JobFailed(Exception):
    """A sweep's job that failed with an exit status of its own (a full disk's 74), as its
    launcher hands it back (a job's error, pickled from another process): the sweep exits
    with it, as the job alone would have."""

    def __init__(self, why: str, exit_status: int) -> None:
        super().__init__(why, exit_status)
        self.exit_status = exit_status


def one_line(exc: BaseException) -> str:
    """The exception as one line, credentials redacted."""
    text = str(exc).strip().splitlines()
    return redact_text(f"{type(exc).__name__}: {text[0][:300]}" if text else repr(exc))


def is_disk_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS


def is_store_down(exc: BaseException) -> bool:
    """Whether ``exc`` is the tracking store not answering (a tracking server down, refusing,
    timing out or failing its requests after MLflow's retries), not an error of specexp's.
    Its client's errors only: a server's refused connection is a run's failure."""
    # MLflow's REST client: "API request to URL failed with exception ..." or "... failed
    # with error code 503 != 200"; requests' own errors where MLflow lets them through.
    kind = type(exc)
    if kind.__name__ == "MlflowException" and str(exc).startswith("API request to"):
        return True
    return isinstance(exc, OSError) and kind.__module__.split(".")[0] in ("requests", "urllib3")


def exit_status(exc: BaseException, otherwise: int = BUG) -> int:
    """The exit status of a command stopped by ``exc`` (docs/cli.md's table)."""
    if is_disk_error(exc):
        return DISK
    return STORE_DOWN if is_store_down(exc) else otherwise


def log_traceback(exc: BaseException) -> None:
    """The traceback to the log files (never the terminal: it gets :func:`one_line`),
    credentials redacted (a store's error names its URL, password and all)."""
    trace = redact_text("".join(traceback.format_exception(exc)).rstrip())
    record = _log.makeRecord(
        _log.name, logging.ERROR, __file__, 0, f"{one_line(exc)}\n{trace}", (), None
    )
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            try:
                handler.handle(record)
            except OSError:  # the disk that failed holds the log too
                pass

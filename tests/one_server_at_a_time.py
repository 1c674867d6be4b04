"""Tests that start an engine's server run one at a time, whatever the test toolchain does.

A server and its client measure on the machine's few cores, and two of them beside each other
would disturb each other's figures (and once took each other's port). `--dist loadgroup` keeps
these tests on one pytest-xdist worker when it can group them - it cannot under pytest 9.2,
whose node ids no longer carry the group xdist writes into them - but the guarantee is this
plugin's, not the plugin's internals:

- each test marked ``engine_server`` holds an exclusive lock that every worker of the run
  shares (a file lock), from its setup to its teardown, and keeps it for its worker's next
  test while that test is one too or is of the same module (whose module fixtures may keep a
  server up);
- each hold is written down with its worker and times; after the run the controller fails the
  suite if two holds overlapped in time, and says how long workers waited for the lock (a wait
  means the tests were not grouped: the suite stays correct, only slower).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import IO, Optional

import pytest

MARK = "engine_server"
# One name per test run, set by the controller before its workers start (they inherit it).
RUN = "SPECEXP_TEST_RUN"
os.environ.setdefault(RUN, uuid.uuid4().hex)


def run_dir() -> Path:
    """This run's lock and journal, shared by its workers."""
    directory = Path(tempfile.gettempdir()) / f"specexp-tests-{os.environ[RUN]}"
    directory.mkdir(exist_ok=True)
    return directory


def locked(path: Path) -> IO[str]:
    """``path`` opened and locked exclusively among processes (waited for); closing unlocks."""
    handle = open(path, "a")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


class _Hold:
    """This worker's hold on the run's lock (a file lock every worker shares): since when,
    after how long a wait, over which tests."""

    def __init__(self) -> None:
        asked = time.time()
        self._file = locked(run_dir() / "engine-servers.lock")
        self.since = time.time()
        self.waited = self.since - asked
        self.tests: list[str] = []

    def release(self) -> None:
        until = time.time()
        self._file.close()  # which releases the lock
        record = {
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            "since": self.since,
            "until": until,
            "waited_s": self.waited,
            "tests": self.tests,
        }
        # One short line per hold, appended: whole lines whichever worker writes.
        with open(run_dir() / "holds.jsonl", "a") as journal:
            journal.write(json.dumps(record) + "\n")


_held: Optional[_Hold] = None


def _keeps_lock(item: pytest.Item, nextitem: Optional[pytest.Item]) -> bool:
    return nextitem is not None and (
        nextitem.get_closest_marker(MARK) is not None or nextitem.module is item.module
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Optional[pytest.Item]):
    global _held
    if _held is None and item.get_closest_marker(MARK):
        _held = _Hold()
    if _held is not None:
        _held.tests.append(item.nodeid)
    yield
    if _held is not None and not _keeps_lock(item, nextitem):
        _held.release()
        _held = None


def overlaps(holds: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of holds of different workers that overlapped in time."""
    ordered = sorted(holds, key=lambda hold: hold["since"])
    found = []
    for i, first in enumerate(ordered):
        for second in ordered[i + 1 :]:
            if second["since"] >= first["until"]:
                break
            if second["worker"] != first["worker"]:
                found.append((first, second))
    return found


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # a worker: the controller reads every worker's holds
    directory = run_dir()
    journal = directory / "holds.jsonl"
    holds = (
        [json.loads(line) for line in journal.read_text().splitlines()] if journal.exists() else []
    )
    shutil.rmtree(directory, ignore_errors=True)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    waited = sum(hold["waited_s"] for hold in holds)
    if reporter is not None and waited >= 1:
        reporter.write_line(
            f"engine-server tests waited {waited:.0f} s for one another on "
            f"{len({h['worker'] for h in holds})} workers: pytest-xdist did not keep them on one "
            "(a test toolchain outside scripts/test-toolchain.txt?)"
        )
    clashes = overlaps(holds)
    if clashes:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if reporter is not None:
            for first, second in clashes:
                reporter.write_line(
                    f"FAILED: engine-server tests overlapped in time on {first['worker']} and "
                    f"{second['worker']}: {first['tests']} and {second['tests']}",
                    red=True,
                )

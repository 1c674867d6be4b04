"""A signal swallowed into another error on its way up is still known as the signal; one that
comes inside a store's write waits for the write."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specexp.host import interrupt

# In a process of its own: what was received is remembered for the process's life.
SWALLOWED = """
import os, signal, time
from specexp.host import interrupt
interrupt.install()
try:
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    except KeyboardInterrupt:
        raise ValueError("a library's own error")  # as OmegaConf's traversal did
except ValueError:
    pass
print(interrupt.received().name)
try:
    interrupt.stop_if_received()
except KeyboardInterrupt as stopped:
    print("stopped:", stopped)
"""


def test_a_sigterm_turned_into_another_error_still_stops_the_work():
    result = subprocess.run(
        [sys.executable, "-c", SWALLOWED], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["SIGTERM", "stopped: signal 15"]


def test_nothing_received_stops_nothing():
    assert interrupt.received() is None
    interrupt.stop_if_received()


# A store whose write receives SIGTERM (once, or twice: a store that hangs) mid-call, as the
# sweep-resume test's sweep did on 7 December inside the sqlite commit of a job's first tags.
INSIDE_A_WRITE = """
import os, signal, sys, tempfile
from pathlib import Path
from specexp.host import interrupt
from specexp.tracking.journal import FailoverRun

class Store:
    run_id, uri = "r1", "sqlite:///s.db"
    store = type("S", (), {"experiment_name": "specexp"})()
    calls = []

    def set_tags(self, tags):
        for _ in range(int(sys.argv[1])):
            os.kill(os.getpid(), signal.SIGTERM)
        self.calls.append("set_tags")

    def end(self, status):
        self.calls.append(status)

interrupt.install()
journal = Path(tempfile.mkdtemp()) / "mlflow_offline.json"
run = FailoverRun(Store(), journal, print)
try:
    run.set_tags({"a": "b"})
except KeyboardInterrupt as stopped:
    print("stopped:", stopped)
run.end("KILLED")
print(Store.calls, journal.exists())
"""


@pytest.mark.parametrize(("signals", "calls"), [(1, ["set_tags", "KILLED"]), (2, ["KILLED"])])
def test_an_interrupt_inside_a_store_write_waits_for_it_and_a_second_does_not(signals, calls):
    """Cut inside the store's commit, a job's run stayed RUNNING in the store and its KILLED
    went to a journal as a store failure. The write finishes, then the interrupt is raised and
    the run's end reaches the store; a second signal (a store that hangs) raises at once."""
    result = subprocess.run(
        [sys.executable, "-c", INSIDE_A_WRITE, str(signals)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["stopped: signal 15", f"{calls} False"]

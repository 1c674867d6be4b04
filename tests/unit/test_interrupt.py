"""A signal swallowed into another error on its way up is still known as the signal."""

from __future__ import annotations

import subprocess
import sys

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

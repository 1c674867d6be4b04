"""The suite's guarantee that engine-server tests never run beside each other
(tests/one_server_at_a_time.py), held on a toolchain that does not group them: two workers
given two such tests in two files with `--dist loadfile` (one file each) take turns; with the lock taken away, the run
fails and names both tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.one_server_at_a_time import RUN

pytestmark = pytest.mark.no_engine_server

SLEEPING_TESTS = """
import time
import pytest

@pytest.mark.engine_server
def test_{name}():
    time.sleep(2)
"""
WITHOUT_LOCK = """
import tests.one_server_at_a_time as plugin

plugin.locked = lambda path: open(path, "a")
"""


def two_workers(tmp_path: Path, conftest: str = "") -> tuple[subprocess.CompletedProcess, float]:
    for name in ("first", "second"):
        (tmp_path / f"test_{name}.py").write_text(SLEEPING_TESTS.format(name=name))
    plugins = 'pytest_plugins = ["tests.one_server_at_a_time"]\n'
    (tmp_path / "conftest.py").write_text(plugins + conftest)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    engine_server: x\n")
    # A run of its own: not this suite's lock, which the servers' worker may hold for minutes.
    env = {k: v for k, v in os.environ.items() if k != RUN}
    env["PYTHONPATH"] = str(REPO)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # xdist alone: a third of the start-up
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "xdist.plugin", "-p", "no:cacheprovider"]
        + ["-n", "2"]
        + ["--dist", "loadfile", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.monotonic() - began


def test_two_workers_take_turns_with_engine_server_tests(tmp_path):
    done, took = two_workers(tmp_path)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "2 passed" in done.stdout
    assert took >= 4  # one after the other, never both sleeps at once
    assert "waited" in done.stdout  # and the run says they were not grouped


def test_engine_server_tests_that_overlap_fail_the_run(tmp_path):
    """The check's named mutation: the lock taken away."""
    done, _ = two_workers(tmp_path, WITHOUT_LOCK)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "2 passed" in done.stdout
    assert "overlapped in time" in done.stdout
    assert "test_first" in done.stdout and "test_second" in done.stdout

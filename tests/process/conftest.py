"""Which process tests may run beside others under pytest-xdist (`python -m pytest -n 2 --dist
loadgroup tests`): every test of this tier is marked ``engine_server`` - run one at a time,
each holding the run's lock (tests/one_server_at_a_time.py), for an engine's server and its
client would compete for the cores they measure on - and put in one xdist group, which keeps
them on one worker - except those that start no engine's server, which run beside them as the
unit and statistics tiers do: the files below (commands composed and parsed, dry runs,
generated models, stores written by the test, test servers of known pacing) and, in the other
files, each test marked ``no_engine_server`` (a refusal before launch, a dry run, a test
server, the doctor, leases) or ``load_tolerant`` (it starts a server, but asserts only how a
fault, an interrupt, a start or a stop is handled, which another server beside it cannot
change: a server killed, stalled, never ready or dying at start, Ctrl-C, a store that is down).
Moving a test out of the group never lengthens the suite: the group runs on one worker, the
rest is handed to whichever worker is free."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.program_runs import Compose, run_checks

SERVERLESS = {
    "test_config_validation.py",
    "test_dry_run.py",
    "test_engine_plugin.py",
    "test_events.py",
    "test_goodput.py",
    "test_gpu_node.py",
    "test_history_cli.py",
    "test_runbook.py",
    "test_schedule_exports.py",
    "test_sglang_commands.py",
    "test_tinymodels.py",
    "test_trace_replay.py",
    "test_vllm_commands.py",
}
# The group lets pytest-xdist keep them on one worker; the mark makes them hold the run's
# lock (tests/one_server_at_a_time.py), so that they never overlap even where it does not.
SERVERS = (pytest.mark.xdist_group("servers"), pytest.mark.engine_server)


@pytest.fixture(scope="session")
def checked() -> dict[Compose, SimpleNamespace]:
    """Every command the collected files compose in ``@checks`` functions
    (tests/program_runs.py), run by its engine's own code: one launch of each engine's
    interpreter for all of them (importing SGLang takes ~9 s of CPU, vLLM ~5 s)."""
    return run_checks()


# First: pytest-xdist's worker names each test's group from its marks in this same hook,
# and runs before a conftest loaded at start-up (a file named on the command line) otherwise.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        path = Path(item.fspath)
        if (
            path.parent == here
            and path.name not in SERVERLESS
            and not item.get_closest_marker("no_engine_server")
            and not item.get_closest_marker("load_tolerant")
        ):
            for mark in SERVERS:
                item.add_marker(mark)

"""Which process tests may run beside others under pytest-xdist
(`python -m pytest -n 2 --dist loadgroup tests`): every test of this tier is in one group,
run one after another on one worker - its servers and their clients would compete for the
cores they measure on - except the files below, which start no server (commands composed
and parsed, dry runs, generated models, stores written by the test), and run beside them
as the unit and statistics tiers do."""

from __future__ import annotations

from pathlib import Path

import pytest

SERVERLESS = {
    "test_config_validation.py",
    "test_dry_run.py",
    "test_gpu_node.py",
    "test_history_cli.py",
    "test_runbook.py",
    "test_sglang_commands.py",
    "test_tinymodels.py",
    "test_vllm_commands.py",
}
SERVERS = pytest.mark.xdist_group("servers")


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        path = Path(item.fspath)
        if path.parent == here and path.name not in SERVERLESS:
            item.add_marker(SERVERS)

"""SGLang's own argument parser, run on composed commands (the releases scripts/install.sh
puts under .engines/sglang-<version>; no GPU needed to parse)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specexp.engines import get_engine
from specexp.host.job import Job
from tests.conftest import REPO, compose_job

ENGINE = get_engine("sglang")
STACKS = {"cu128": "0.5.9", "cu130": "0.5.9", "local": "0.5.23"}


def parser_dir(version: str):
    path = REPO / ".engines" / f"sglang-{version}"
    if not (path / "sglang").is_dir():
        message = f"SGLang {version} parser not installed: run scripts/install.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def composed(stack: str, attention: str, allreduce: str, speculative: str, *extra: str):
    overrides = [
        "engine=sglang",
        "model=kimi-k2.5",
        f"stack={stack}",
        f"attention_backend={attention}",
        f"allreduce_backend={allreduce}",
        f"speculative={speculative}",
        "model.draft_path=org/small-draft",
        "engine.mem_fraction_static=0.85",
        "engine.random_seed=1",
    ]
    if stack == "local":  # pin the spelling instead of probing this machine's interpreter
        overrides.append(f"+stack.versions.sglang={STACKS[stack]}")
    job = compose_job(*overrides, *extra)
    return job, ENGINE.server_command(job.server).at(30000)


def check_with_real_parser(version: str, job: Job, launches) -> list:
    command = ENGINE.flag_check_command(job.server, launches)
    command[0] = (
        sys.executable
    )  # the stacks' interpreters live on GPU nodes; this one has the parser
    env = {**os.environ, "PYTHONPATH": str(parser_dir(version))}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def resolve_with_real_code(version: str, job: Job, launches) -> list[dict]:
    """SGLang's own speculative resolution of each composed command (see
    ``SGLangEngine.resolution_command``), run by this interpreter on the release."""
    command = ENGINE.resolution_command(job.server, launches)
    command[0] = sys.executable
    env = {**os.environ, "PYTHONPATH": str(parser_dir(version))}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])

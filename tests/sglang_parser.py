"""SGLang commands as specexp composes them, and the SGLang releases whose own parser and
resolution check them (scripts/install.sh puts them under .engines/sglang-<version>; no GPU
needed): tests/program_runs.py runs those checks, one launch per release."""

from __future__ import annotations

import os

import pytest

from specexp.engines import get_engine
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

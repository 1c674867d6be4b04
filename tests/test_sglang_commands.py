"""Every SGLang command specexp composes is accepted by SGLang's own argument parser.

The parsers are real SGLang releases installed under .engines/sglang-<version> by
scripts/install.sh (no GPU needed to parse). Each composed command is checked against the
release whose spelling it was composed for.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import defaultdict

import pytest

from specexp.engines import get_engine
from specexp.runner import prepare
from tests.conftest import REPO, compose_run

ENGINE = get_engine("sglang")
STACKS = {"cu128": "0.5.9", "cu130": "0.5.9", "local": "0.5.23"}
ATTENTION = [b for b in ENGINE.attention_backends]
ALLREDUCE = [b for b in ENGINE.allreduce_backends]
SPECULATIVE = ["none", "eagle3", "ngram", "draft"]


def parser_dir(version: str):
    path = REPO / ".engines" / f"sglang-{version}"
    if not (path / "sglang").is_dir():
        message = f"SGLang {version} parser not installed: run scripts/install.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def composed(stack: str, attention: str, allreduce: str, speculative: str):
    overrides = ["engine=sglang", "model=kimi-k2.5", f"stack={stack}", f"attention_backend={attention}",
                 f"allreduce_backend={allreduce}", f"speculative={speculative}",
                 "model.draft_path=org/small-draft", "engine.mem_fraction_static=0.85", "engine.random_seed=1"]
    if stack == "local":  # pin the spelling instead of probing this machine's interpreter
        overrides.append(f"+stack.versions.sglang={STACKS[stack]}")
    cfg = compose_run(*overrides)
    prepare(cfg)
    return cfg, ENGINE.launch_spec(cfg, 30000)


def check_with_real_parser(version: str, cfg, launches) -> list:
    command = ENGINE.flag_check_command(cfg, launches)
    command[0] = sys.executable  # the stacks' interpreters live on GPU nodes; this one has the parser
    env = {**os.environ, "PYTHONPATH": str(parser_dir(version))}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def combinations():
    """Every stack x speculative method, crossed with every attention backend and with every
    allreduce backend (flags of those two groups never interact, so not with each other)."""
    for stack, speculative in itertools.product(STACKS, SPECULATIVE):
        for attention in ATTENTION:
            yield stack, attention, "flashinfer_fusion", speculative
        for allreduce in ALLREDUCE:
            yield stack, "flashinfer", allreduce, speculative


def test_every_composed_command_parses_with_its_sglang_release():
    by_version = defaultdict(list)
    for stack, attention, allreduce, speculative in combinations():
        cfg, launch = composed(stack, attention, allreduce, speculative)
        by_version[STACKS[stack]].append((cfg, launch))
    for version, jobs in by_version.items():
        errors = check_with_real_parser(version, jobs[0][0], [launch for _, launch in jobs])
        rejected = [(" ".join(launch.argv[3:]), error) for (_, launch), error in zip(jobs, errors) if error]
        assert not rejected, f"SGLang {version} rejected: {rejected[:5]}"
        assert len(errors) == len(jobs)


def test_the_parser_check_can_fail():
    cfg, launch = composed("cu130", "flashinfer", "auto", "none")
    launch.argv += ["--attention-backend", "not-a-backend"]
    bogus = type(launch)(argv=launch.argv[:5] + ["--no-such-flag"], env={})
    errors = check_with_real_parser("0.5.9", cfg, [launch, bogus])
    assert "invalid choice: 'not-a-backend'" in errors[0]
    assert "unrecognized arguments: --no-such-flag" in errors[1]


def test_fusion_flag_is_spelled_for_the_stacks_release():
    _, old = composed("cu130", "flashinfer", "flashinfer_fusion", "eagle3")
    _, new = composed("local", "flashinfer", "flashinfer_fusion", "eagle3")
    assert "--enable-flashinfer-allreduce-fusion" in old.argv
    assert ["--flashinfer-allreduce-fusion-backend", "auto"] == new.argv[new.argv.index("--flashinfer-allreduce-fusion-backend"):][:2]
    assert "--enable-flashinfer-allreduce-fusion" not in new.argv

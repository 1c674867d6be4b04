"""A batch schedule (draft tokens by batch size) in each engine's own terms, and TensorRT-LLM's
``draft_len_schedule`` - which does not run here - checked against the rules read from its
source (NVIDIA/TensorRT-LLM 011d0933: llmapi/llm_args.py, _torch/speculative/utils.py) on
the cases of its own test, tests/unittest/_torch/speculative/hw_agnostic/
test_min_runtime_draft_len.py at that commit."""

from __future__ import annotations

import pytest

from specexp.analysis.arms import Arm
from specexp.analysis.crossover import Crossover, check_switch_off, recommend
from specexp.analysis.results import JobRun, Unit
from specexp.core.schemas.speculative import SpeculativeConfig, SpeculativeMethod
from specexp.core.stats.summaries import summarize
from specexp.engines import get_engine, schedule_settings, trtllm
from specexp.engines.records import BatchSchedule
from tests.conftest import compose_job

pytestmark = pytest.mark.unit

DRAFT = SpeculativeConfig(method=SpeculativeMethod.draft, draft_model="/d", num_draft_tokens=4)
EAGLE = SpeculativeConfig(method=SpeculativeMethod.eagle3, draft_model="/e", num_draft_tokens=3)
THREE_LEVELS = BatchSchedule(((1, 7, 4), (8, 31, 2), (32, 64, 0)))


def test_a_batch_schedule_covers_one_to_its_last_batch_without_gaps():
    off = BatchSchedule.switch_off(8, 4, 64)
    assert off.ranges == ((1, 7, 4), (8, 64, 0))
    assert [off.draft_tokens(b) for b in (1, 7, 8, 64, 500)] == [4, 4, 0, 0, 0]
    assert BatchSchedule.switch_off(1, 4, 64).ranges == ((1, 64, 0),)
    assert off.describe() == "1-7: 4 draft tokens, 8-64: off"
    for broken in (((2, 8, 4),), ((1, 4, 4), (6, 8, 0)), ((1, 4, -1),), ()):
        with pytest.raises(ValueError):
            BatchSchedule(broken)


# TensorRT-LLM's own cases at 011d0933 (test_min_runtime_draft_len.py): (schedule, batch
# size, floor, draft length).
SCHEDULE = {4: 4, 8: 2, 32: 1}
ITS_CASES = [
    (SCHEDULE, 1, 1, 4),
    (SCHEDULE, 8, 1, 2),
    (SCHEDULE, 32, 1, 1),
    (SCHEDULE, 33, 1, 1),
    (SCHEDULE, 4096, 1, 1),
    ({4: 4, 8: 0}, 8, 1, 1),
    (SCHEDULE, 33, 0, 0),
    ({4: 4, 8: 0}, 8, 0, 0),
    *[(SCHEDULE, b, 1, d) for b, d in ((1, 4), (4, 4), (5, 2), (8, 2), (9, 1), (32, 1))],
]


@pytest.mark.parametrize("schedule,batch,floor,expected", ITS_CASES)
def test_the_trtllm_lookup_gives_what_its_own_tests_expect(schedule, batch, floor, expected):
    assert trtllm.draft_len_at(schedule, batch, floor) == expected


def test_the_trtllm_validator_refuses_what_its_validator_refuses():
    assert trtllm.check({32: 1, 4: 4, 8: 2}, 4) == SCHEDULE  # sorted by key
    for schedule, max_draft_len, reason in (
        ({0: 4}, 4, "must be >= 1"),
        ({1: 4, 8: -1}, 4, "must be >= 0"),
        ({4: 2, 8: 1}, 4, "must equal max_draft_len"),
        ({4: 4, 8: 5}, 4, "must be <= max_draft_len"),
    ):
        with pytest.raises(ValueError, match=reason):
            trtllm.check(schedule, max_draft_len)


@pytest.mark.parametrize("schedule", [BatchSchedule.switch_off(8, 4, 64), THREE_LEVELS])
def test_the_trtllm_export_passes_its_validator_and_drafts_as_the_schedule(schedule):
    """Keys are inclusive upper bounds; above the largest the floor: 0 for n-grams (two
    models), so their lookup is the schedule exactly; one-engine modes draft 1 there."""
    for method, floor in trtllm.FLOOR.items():
        setting = trtllm.draft_len_schedule(schedule, method)
        config = setting.speculative_config
        keys = trtllm.check(config["draft_len_schedule"], config["max_draft_len"])
        for batch in range(1, 100):
            assert trtllm.draft_len_at(keys, batch, floor) == max(
                schedule.draft_tokens(batch), floor
            )
        assert ("never switched off" in setting.note) == bool(floor)


def test_what_trtllm_cannot_take_exports_nothing_and_says_why():
    longer_later = BatchSchedule(((1, 7, 2), (8, 64, 4)))
    off_at_one = BatchSchedule(((1, 3, 0), (4, 64, 2)))
    for schedule, reason in (
        (longer_later, "no length longer than batch size 1's"),
        (off_at_one, "no drafting at batch size 1"),
        (BatchSchedule.switch_off(1, 4, 64), "no drafting at batch size 1"),
    ):
        setting = trtllm.draft_len_schedule(schedule, SpeculativeMethod.draft)
        assert not setting.exported and reason in setting.note


def test_each_engine_writes_a_switch_off_in_its_own_terms():
    settings = schedule_settings(BatchSchedule.switch_off(8, 3, 64), EAGLE)
    assert settings["vllm"].speculative_config == {
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 7, 3], [8, 64, 0]],
    }
    sglang = settings["sglang"]
    assert sglang.files == {
        "adaptive.json": {"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [0]}}
    }
    assert sglang.flags[-2:] == ("--speculative-num-steps", "3")  # a candidate, as required
    assert settings["trtllm"].speculative_config == {
        "decoding_type": "Eagle3",
        "max_draft_len": 3,
        "draft_len_schedule": {7: 3},
    }
    assert settings["llamacpp"].launches == {
        "1-7": ("--model-draft", "/e", "--spec-type", "draft-eagle3", "--spec-draft-n-max", "3"),
        "8-64": (),
    }


def test_sglang_exports_nothing_where_it_would_turn_adaptive_off():
    """SGLang turns adaptive speculation off (with a warning) but for EAGLE chains: for a
    draft model, n-grams and trees the setting would run at the fixed length."""
    tree = SpeculativeConfig(
        method=SpeculativeMethod.eagle3, draft_model="/e", eagle_topk=4, num_steps=2
    )
    ngram = SpeculativeConfig(method=SpeculativeMethod.ngram)
    for spec in (DRAFT, tree, ngram):
        setting = get_engine("sglang").schedule(THREE_LEVELS, spec)
        assert not setting.exported and "EAGLE/EAGLE3 chains" in setting.note


def test_a_withheld_recommendation_exports_nothing():
    single = Crossover("draft", "none", [1, 4, 16], [1.5, 1.0, 0.8], 4.0, 3.0, 5.0)
    single.launches_only = True
    advice = recommend(single, DRAFT)
    assert advice.threshold is None and advice.settings == {}
    assert advice.note.startswith("no switch-off recommended")
    held = Crossover(
        "draft", "none", [1, 4, 16], [1.5, 1.0, 0.8], 4.0, 3.2, 5.0, lowest_effect_ci=(1.3, 1.7)
    )
    assert set(recommend(held, DRAFT).settings) == {"llamacpp", "sglang", "trtllm", "vllm"}


@pytest.mark.parametrize("streams,drafts", [(1, True), (2, False), (4, False)])
def test_llamacpp_serves_a_switch_off_as_the_server_of_the_levels_load(streams, drafts):
    job = compose_job(
        "engine=llamacpp",
        "model=tiny-pair-small",
        "speculative=draft_switch_off",
        "+multirun.switch_off_at=2",
        f"concurrency.streams={streams}",
    )
    argv = job.command.at(8080).argv
    assert ("--spec-type" in argv) == drafts


# Recorded on llama.cpp here (3 December 2026, a loaded 2-core machine): `specexp sweep
# +sweep=cpu_crossover speculative=none,draft,draft_switch_off multirun.switch_off_at=4
# concurrency.streams=1,4 stats.measured_runs=3 stats.launches=3 workload.max_tokens=64`,
# each launch's mean tok/s. The switched-off arm drafted at 1 stream (21 drafts) and not at
# 4 (0 drafts for 768 tokens), on the fixed arms' own servers.
RECORDED = {
    "speculative=draft": {1: (50.28, 72.08, 67.04), 4: (68.39, 104.81, 74.69)},
    "speculative=draft_switch_off": {1: (65.48, 78.34, 65.39), 4: (56.73, 53.46, 53.28)},
    "speculative=none": {1: (36.75, 44.76, 46.12), 4: (54.51, 60.89, 54.79)},
}


def launch_arms(name: str) -> tuple[str, dict[int, Arm]]:
    levels = {}
    for level, values in RECORDED[name].items():
        factors = {"speculative": name.split("=")[1], "concurrency.streams": str(level)}
        run = JobRun(f"{name}-{level}", name, "FINISHED", "job", factors, {}, values=values,
                     unit=Unit.launch)  # fmt: skip
        levels[level] = Arm(run, name, factors, summarize(values))
    return name, levels


def test_the_recorded_llamacpp_switch_off_is_checked_against_the_faster_fixed_arm():
    """At both levels the draft arm had the higher mean, so the switched-off arm is held to
    it; three launches a level on a loaded machine leave every interval wide: undecided, not
    "behind" (at 4 streams the switched-off arm ran as the plain server, -33%, CI to +45%)."""
    check = check_switch_off(
        launch_arms("speculative=draft_switch_off"),
        launch_arms("speculative=draft"),
        launch_arms("speculative=none"),
        4,
        0.95,
        0.02,
    )
    assert check.followed == ["speculative=draft", "speculative=draft"]
    assert check.outcomes == ["undecided", "undecided"]
    low, high = check.comparisons[1].ci_low, check.comparisons[1].ci_high
    assert low < check.comparisons[1].ratio < 1 < high
    assert check.statement.endswith("undecided at 1, 4")

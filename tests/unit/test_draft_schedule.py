"""The draft length to deploy by level, from a sweep of draft lengths by concurrency: on
only where a length is shown faster than none, the best mean among those, ties named; in
the forms vLLM and SGLang take."""

from __future__ import annotations

import pytest

from specexp.analysis.arms import Arm
from specexp.analysis.results import JobRun, Tag
from specexp.analysis.schedule import DraftSchedule, draft_schedule
from specexp.core.schemas.speculative import SpeculativeConfig, SpeculativeMethod
from specexp.core.stats.comparison import compare
from specexp.core.stats.summaries import summarize

pytestmark = pytest.mark.unit

FACTOR = "concurrency.streams"
NONE = [100.0, 101.0, 99.0, 100.5, 99.5]


def arm(level: int, draft_tokens: int) -> Arm:
    name = f"k{draft_tokens}-c{level}"
    factors = {FACTOR: str(level), "speculative.num_draft_tokens": str(draft_tokens)}
    tags = {Tag.config_fingerprint: f"fp{draft_tokens}"}
    run = JobRun(name, name, "FINISHED", "job", factors, tags, values=tuple(NONE))
    return Arm(run, name, factors, summarize(NONE))


def scaled(factor: float) -> list[float]:
    return [v * factor for v in NONE]


# Per level, each draft length's tok/s relative to none: at 1 stream 4 and 8 both pay (8 a
# little more, within noise); at 8, only 2 pays; at 32, none does.
SPEEDUPS = {
    1: {2: 1.2, 4: 1.5, 8: 1.52},
    8: {2: 1.1, 4: 1.0, 8: 0.9},
    32: {2: 0.97, 4: 0.9, 8: 0.8},
}


def sweep():
    speculative = {
        f"fp{k}": SpeculativeConfig(method=SpeculativeMethod.draft, num_draft_tokens=k)
        for k in (2, 4, 8)
    }
    pairs, comparisons = [], []
    for level, by_k in SPEEDUPS.items():
        for k, speedup in by_k.items():
            pairs.append((arm(level, 0), arm(level, k)))
            comparisons.append(compare(NONE, scaled(speedup), threshold=0.01))
    fingerprints = {a.run_id: a.run.tags[Tag.config_fingerprint] for _, a in pairs}
    return draft_schedule(pairs, comparisons, speculative, fingerprints, FACTOR)


def test_each_level_gets_the_best_length_shown_faster_and_off_where_none_is():
    schedule = sweep()
    assert schedule is not None
    chosen = {c.level: c for c in schedule.choices}
    assert chosen[1].draft_tokens == 8 and chosen[1].indistinguishable == (4,)
    assert chosen[1].ci_low > 1
    assert chosen[8].draft_tokens == 2
    assert chosen[32].draft_tokens == 0 and chosen[32].speedup is None
    assert schedule.batch_schedule(256).ranges == ((1, 7, 8), (8, 31, 2), (32, 256, 0))
    # Each engine's own form, written over batch sizes 1..1024.
    assert schedule.settings["vllm"].speculative_config == {
        "num_speculative_tokens": 8,
        "num_speculative_tokens_per_batch_size": [[1, 7, 8], [8, 31, 2], [32, 1024, 0]],
    }
    # SGLang's adaptive speculation serves EAGLE chains only: a draft model gets no setting.
    assert not schedule.settings["sglang"].exported
    assert schedule.settings["trtllm"].speculative_config == {
        "decoding_type": "DraftTarget",
        "max_draft_len": 8,
        "draft_len_schedule": {7: 8, 31: 2},
    }
    assert list(schedule.settings["llamacpp"].launches) == ["1-7", "8-31", "32-1024"]
    assert DraftSchedule.from_json(schedule.to_json()) == schedule


def test_no_schedule_from_a_sweep_of_one_length():
    pairs = [(arm(1, 0), arm(1, 4)), (arm(8, 0), arm(8, 4))]
    comparisons = [compare(NONE, scaled(1.5)), compare(NONE, scaled(0.9))]
    speculative = {"fp4": SpeculativeConfig(method=SpeculativeMethod.draft, num_draft_tokens=4)}
    fingerprints = {a.run_id: "fp4" for _, a in pairs}
    assert draft_schedule(pairs, comparisons, speculative, fingerprints, FACTOR) is None


def test_single_launches_give_no_setting_and_say_why():
    speculative = {
        f"fp{k}": SpeculativeConfig(method=SpeculativeMethod.draft, num_draft_tokens=k)
        for k in (2, 4)
    }
    pairs, comparisons = [], []
    for level in (1, 8):
        for k in (2, 4):
            pairs.append((arm(level, 0), arm(level, k)))
            single = compare(NONE, scaled(1.5), threshold=0.01)
            single.hold_for_launches_only()  # one launch per arm, no launch variance known
            comparisons.append(single)
    fingerprints = {a.run_id: a.run.tags[Tag.config_fingerprint] for _, a in pairs}
    schedule = draft_schedule(pairs, comparisons, speculative, fingerprints, FACTOR)
    assert schedule is not None and not schedule.holds
    assert schedule.settings == {}  # withheld: nothing exported
    assert all(c.launches_only and "one launch per arm" in c.reason for c in schedule.choices)
    assert DraftSchedule.from_json(schedule.to_json()) == schedule
    assert sweep() is not None and sweep().holds

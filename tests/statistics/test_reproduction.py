"""Reproduction verdicts against a truth equal to the published story: the five claims are
one family, and the published figures carry their own noise."""

from __future__ import annotations

import math

import numpy as np
from omegaconf import OmegaConf

from specexp.analysis.arms import make_arms
from specexp.analysis.reproduction import ClaimStatus, reproduce
from specexp.analysis.results import JobRun, Tag
from tests import noise
from tests.conftest import REPO

REFERENCE = OmegaConf.load(REPO / "conf" / "reference" / "cuda13_story.yaml")
ALPHA = 0.05


def measured_story(
    rng: np.random.Generator, truth: dict[str, float], cv: float, per_launch: bool = True
) -> list:
    """Each published point measured: five launch means (launch variance in the values),
    or with ``per_launch`` false five runs of one launch each."""
    runs = [
        JobRun.from_store(
            point,
            None,
            "FINISHED",
            {Tag.reference_point: point},
            {},
            [] if per_launch else noise.runs(rng, mean, 5, cv),
            noise.runs(rng, mean, 5, cv) if per_launch else [],
        )
        for point, mean in truth.items()
    ]
    arms, _ = make_arms(runs, label_tags=[], confidence=0.95, metric="tok_per_s")
    return arms


def false_contradictions(rng: np.random.Generator, published_noise_cv: float, trials: int) -> float:
    published = {p: float(v.tok_per_s) for p, v in REFERENCE.points.items()}
    any_contradicted = 0
    for _ in range(trials):
        # The published figures are 5-run means around the truth (or the truth itself).
        truth = {
            p: v / math.exp(rng.normal(0, published_noise_cv / math.sqrt(5)))
            for p, v in published.items()
        }
        _, checks = reproduce(
            REFERENCE,
            measured_story(rng, truth, 0.02),
            confidence=0.95,
            threshold=0.01,
            power=0.8,
            same_hardware=True,
        )
        any_contradicted += any(c.status == ClaimStatus.contradicted for c in checks)
    return any_contradicted / trials


def test_false_contradictions_stay_family_wise_at_alpha():
    rng = np.random.default_rng(15)
    trials = 250
    bound = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / trials)
    assert false_contradictions(rng, 0.0, trials) <= bound  # truth = the published values
    assert false_contradictions(rng, 0.02, trials) <= bound  # published: 5-run means at 2% CV


def test_rows_say_what_their_numbers_say_and_a_real_difference_is_caught():
    rng = np.random.default_rng(16)
    published = {p: float(v.tok_per_s) for p, v in REFERENCE.points.items()}
    truth = dict(published, **{"cu128-eagle3": 89.5})  # EAGLE-3 was never 40% slower
    caught = 0
    for _ in range(100):
        _, checks = reproduce(
            REFERENCE,
            measured_story(rng, truth, 0.02),
            confidence=0.95,
            threshold=0.01,
            power=0.8,
            same_hardware=True,
        )
        by_id = {c.id: c for c in checks}
        caught += by_id["eagle3-liability-cu128"].status == ClaimStatus.contradicted
        for check in checks:
            excludes_one = check.agreement_low > 1 or check.agreement_high < 1
            assert (check.status == ClaimStatus.contradicted) == excludes_one
            if check.status == ClaimStatus.reproduced:
                side = (
                    check.comparison.ci_low > 1
                    if check.published_ratio > 1
                    else check.comparison.ci_high < 1
                )
                assert side
    assert caught == 100


def test_on_single_launches_a_status_is_kept_apart_and_none_is_contradicted():
    """No launch variance known: what the runs say is the check's within-launch status; its
    status says nothing (a 2% launch offset alone would contradict claims as often as not)."""
    rng = np.random.default_rng(17)
    published = {p: float(v.tok_per_s) for p, v in REFERENCE.points.items()}
    truth = dict(published, **{"cu128-eagle3": 89.5})
    _, checks = reproduce(
        REFERENCE,
        measured_story(rng, truth, 0.02, per_launch=False),
        confidence=0.95,
        threshold=0.01,
        power=0.8,
        same_hardware=True,
    )
    assert all(c.status == ClaimStatus.inconclusive for c in checks)
    by_id = {c.id: c for c in checks}
    assert by_id["eagle3-liability-cu128"].within_launch == ClaimStatus.contradicted


def stand_ins(rng: np.random.Generator, tok_per_s: dict[str, float]) -> list:
    """reference_cpu's runs: one baseline run for both stacks' baselines, a stand-in for
    each other point (five launch means at 2% CV each)."""
    runs = [
        JobRun.from_store(
            points, None, "FINISHED", {Tag.reference_point: points}, {}, [],
            noise.runs(rng, mean, 5, 0.02),
        )
        for points, mean in tok_per_s.items()
    ]  # fmt: skip
    arms, _ = make_arms(runs, label_tags=[], confidence=0.95, metric="tok_per_s")
    return arms


def test_on_other_hardware_a_stand_in_is_judged_by_direction_never_by_size():
    """A draft that pays doubles throughput here (published: +3.8%), one that is rejected
    costs 70% (published: -40%), the attention default changes nothing: each direction is
    what is judged, so the x2 is no contradiction of +3.8%; the one run standing for both
    baselines measures no stack upgrade. 200 seeded stories; the no-effect claim is called
    reproduced or contradicted in at most alpha of them (plus 3 standard errors)."""
    rng = np.random.default_rng(21)
    trials, wrong_way = 200, 0
    for _ in range(trials):
        arms = stand_ins(
            rng,
            {
                "cu128-baseline,cu130-baseline": 250.0,
                "cu130-baseline-triton": 250.0,
                "cu130-eagle3-fusion": 500.0,
                "cu128-eagle3": 75.0,
            },
        )
        _, checks = reproduce(
            REFERENCE,
            arms,
            confidence=0.95,
            threshold=0.01,
            power=0.8,
            same_hardware=False,
        )
        by_id = {c.id: c for c in checks}
        for claim in ("eagle3-net-positive", "eagle3-liability-cu128", "eagle3-vs-old-baseline"):
            assert by_id[claim].status == ClaimStatus.reproduced, by_id[claim]
            assert "judged by direction only" in by_id[claim].text
        upgrade = by_id["stack-upgrade"]
        assert (
            upgrade.status == ClaimStatus.not_measured and "one run stands for both" in upgrade.text
        )
        wrong_way += by_id["triton-default"].status != ClaimStatus.inconclusive
    assert wrong_way / trials <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / trials)


def test_on_other_hardware_a_stand_in_that_goes_the_other_way_contradicts_the_claim():
    rng = np.random.default_rng(22)
    arms = stand_ins(
        rng,
        {
            "cu128-baseline,cu130-baseline": 250.0,
            "cu130-eagle3-fusion": 125.0,  # the draft "that pays" halves throughput here
        },
    )
    _, checks = reproduce(
        REFERENCE, arms, confidence=0.95, threshold=0.01, power=0.8, same_hardware=False
    )
    by_id = {c.id: c for c in checks}
    assert by_id["eagle3-net-positive"].status == ClaimStatus.contradicted
    assert by_id["eagle3-net-positive"].agreement_low is not None  # the sizes, shown not judged
    missing = by_id["eagle3-liability-cu128"]
    assert missing.status == ClaimStatus.not_measured
    assert "no run stands in for cu128-eagle3" in missing.text


def test_an_older_stacks_baseline_measures_the_stack_claim_and_says_what_it_cannot_tell():
    """With the older stack's baseline (standing for cu128-baseline alone) beside the one
    baseline for both, the stack upgrade is measured between them, by direction only, and
    its text says what such a stand-in can tell and what it cannot; the old stack's
    rejected draft is compared with the old baseline."""
    rng = np.random.default_rng(23)
    launches = {
        ("cu128-baseline,cu130-baseline", "local"): 250.0,
        ("cu128-baseline", "llamacpp-graph-reuse-off"): 200.0,
        ("cu128-eagle3", "llamacpp-graph-reuse-off"): 60.0,
        ("cu130-eagle3-fusion", "local"): 400.0,
    }
    runs = [
        JobRun.from_store(
            f"{points}@{stack}", None, "FINISHED",
            {Tag.reference_point: points, Tag.stack: stack, Tag.engine_version: "b11434"},
            {}, [], noise.runs(rng, mean, 5, 0.02),
        )
        for (points, stack), mean in launches.items()
    ]  # fmt: skip
    arms, _ = make_arms(runs, label_tags=[], confidence=0.95, metric="tok_per_s")
    points, checks = reproduce(
        REFERENCE, arms, confidence=0.95, threshold=0.01, power=0.8, same_hardware=False
    )
    assert points["cu128-baseline"] is not points["cu130-baseline"]
    by_id = {c.id: c for c in checks}
    upgrade = by_id["stack-upgrade"]
    assert upgrade.status == ClaimStatus.reproduced
    assert (
        "a stand-in for the older stack and one for the newer here "
        "(llamacpp-graph-reuse-off (b11434) against local (b11434))"
    ) in upgrade.text
    assert "nothing about the published stacks themselves (cu128 against cu130)" in upgrade.text
    liability = by_id["eagle3-liability-cu128"]
    assert liability.comparison is not None and liability.comparison.baseline == "cu128-baseline"
    assert liability.status == ClaimStatus.reproduced
    assert "changes stack, allreduce_backend, speculative at once" in (
        by_id["eagle3-vs-old-baseline"].text
    )

"""A speculative arm's speed-up against the bound tau / (gamma c + 1): the formula, alpha
from a measured acceptance length, which side limits, and the sweep report that finds c in
an arm serving the draft model alone."""

from __future__ import annotations

import json
import math

import pytest

from specexp.analysis.acceptance import (
    Efficiency,
    Limit,
    alpha_for_length,
    efficiency,
    tokens_per_step,
)
from specexp.analysis.report import SweepFacts, SweepReport, compile_sweep_report
from specexp.analysis.results import JobRun, Metric, Tag, factors_tag
from specexp.core.records import structure, unstructure
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.schemas.stats import StatsConfig
from specexp.output.markdown import sweep_description


def test_the_issue_s_worked_bound():
    """alpha 0.8, gamma 4, c 0.05: tau 3.36 tokens per target step, bound x2.80."""
    tau = tokens_per_step(0.8, 4)
    assert tau == pytest.approx((1 - 0.8**5) / 0.2)
    found = efficiency(
        baseline="none",
        candidate="draft",
        candidate_run_id="r",
        gamma=4,
        tau=tau,
        speedup=1.4,
        speedup_log_se=0.02,
        df=8,
        confidence=0.95,
        cost=(0.05, 0.0, 0.0),
    )
    assert found.bound == pytest.approx(2.8013, abs=1e-4)
    assert found.share == pytest.approx(1.4 / 2.8013, abs=1e-4)
    assert found.alpha == pytest.approx(0.8)
    assert found.low < found.share < found.high
    # The three losses multiply back to the measured speed-up from the ideal gamma + 1.
    assert (4 + 1) / math.prod(found.losses.values()) == pytest.approx(1.4)
    assert found.limit == Limit.overhead  # x2.0 beyond acceptance's x1.49 and cost's x1.2


def test_alpha_inverts_tau_at_the_ends_too():
    for alpha in (0.0, 0.3, 0.9, 0.999):
        assert alpha_for_length(tokens_per_step(alpha, 5), 5) == pytest.approx(alpha, abs=1e-9)
    assert alpha_for_length(1.0, 4) == 0.0 and alpha_for_length(5.0, 4) == 1.0
    # The share of drafted tokens accepted is not alpha: at alpha 0.8, gamma 4 it is 0.59.
    assert (tokens_per_step(0.8, 4) - 1) / 4 == pytest.approx(0.590, abs=1e-3)


@pytest.mark.parametrize(
    ("tau", "cost", "speedup", "limit"),
    [(1.3, 0.05, 1.15, Limit.acceptance), (4.5, 0.5, 1.4, Limit.draft_cost)],
)
def test_the_largest_loss_names_the_limit(tau, cost, speedup, limit):
    found = efficiency(
        baseline="b",
        candidate="c",
        candidate_run_id="r",
        gamma=4,
        tau=tau,
        speedup=speedup,
        speedup_log_se=0.01,
        df=10,
        confidence=0.95,
        cost=(cost, 0.01, 0.01),
    )
    assert found.limit == limit
    assert f"limited by {limit}" in found.sentence()


def test_c_s_error_widens_the_interval_and_c_unmeasured_is_said():
    common = dict(baseline="b", candidate="c", candidate_run_id="r", gamma=4, tau=3.0, speedup=1.5)
    common |= dict(speedup_log_se=0.02, df=10, confidence=0.95)
    exact = efficiency(**common, cost=(0.1, 0.0, 0.0))
    noisy = efficiency(**common, cost=(0.1, 0.01, 0.2))
    assert noisy.high / noisy.low > exact.high / exact.low
    unmeasured = efficiency(**common, cost_source="an EAGLE head is not served alone")
    assert unmeasured.cost is None and unmeasured.bound == 3.0
    assert "bound at c = 0" in unmeasured.sentence()
    # Unmeasured, the draft's cost hides in the rest: that loss cannot be named overhead.
    assert unmeasured.limit == Limit.cost_or_overhead
    assert "the rest (draft cost included) x2.00" in unmeasured.sentence()
    assert "draft cost x1.00" not in unmeasured.sentence()
    assert structure(Efficiency, json.loads(json.dumps(unstructure(noisy)))) == noisy


def job(run_id, speculative, model, values, length=None) -> JobRun:
    factors = {"speculative": speculative, "model": model}
    tags = {
        Tag.factors: factors_tag(factors),
        Tag.engaged: "yes",
        Tag.config_fingerprint: run_id,
        "concurrency": "1",
    }
    metrics = {Metric.acceptance_length_mean: length} if length else {}
    name = f"speculative={speculative} model={model}"
    return JobRun.from_store(run_id, name, "FINISHED", tags, {}, values, [], metrics)


def spread(mean: float) -> list[float]:
    return [mean * (1 + d) for d in (-0.01, 0.0, 0.01, 0.005, -0.005)]


def test_the_sweep_report_finds_c_in_the_draft_served_alone():
    """Target 100 tok/s alone, its draft 1000 (c = 0.1), the draft arm 180 at tau 3.0 with
    four drafted tokens: bound 3.0 / 1.4 = x2.14, reached 84%."""
    runs = [
        job("base", "none", "target", spread(100.0)),
        job("spec", "draft", "target", spread(180.0), length=3.0),
        job("alone", "none", "draft", spread(1000.0)),
    ]
    facts = SweepFacts(
        parent_run_id="p",
        engine="llamacpp",
        order="interleaved",
        baseline="speculative=none",
        crossover_factor=None,
        stats=StatsConfig(threshold=0.02),
        speculative={
            "base": SpeculativeConfig(method="none"),
            "spec": SpeculativeConfig(method="draft", draft_model="/m/draft", num_draft_tokens=4),
            "alone": SpeculativeConfig(method="none"),
        },
        models={"base": "/m/target", "spec": "/m/target", "alone": "/m/draft"},
    )
    report = compile_sweep_report(facts, runs, [], {})
    (found,) = report.efficiencies
    assert found.cost == pytest.approx(0.1, rel=1e-3)
    assert found.cost_source == "speculative=none model=draft served alone"
    assert found.bound == pytest.approx(3.0 / 1.4, rel=1e-3)
    assert found.share == pytest.approx(1.8 / (3.0 / 1.4), rel=1e-3)
    assert found.low < found.share < found.high
    assert found.candidate_run_id == "spec"
    text = sweep_description(report, view_link="v", run_link=str, plot_link=str, limit=20_000)
    assert "**Against the bound**" in text and found.sentence() in text
    assert SweepReport.from_json(report.to_json()).efficiencies == report.efficiencies

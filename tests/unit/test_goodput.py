"""Service levels, goodput, open-loop schedules and the capacity search: pure logic on
records and points whose answers are known exactly."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from omegaconf import OmegaConf

from specexp.analysis.arms import Arm
from specexp.analysis.capacity import CapacityComparison, CapacityVerdict, compare_capacity
from specexp.analysis.crossover import Scale, find_crossover
from specexp.analysis.report import SweepFacts, SweepReport, compile_sweep_report
from specexp.analysis.results import (
    JobRun,
    Metric,
    Tag,
    capacity_points,
    capacity_points_tag,
)
from specexp.analysis.summary import summarize_job
from specexp.core.capacity import (
    Bracket,
    Capacity,
    RatePoint,
    bracket,
    estimate,
    next_rate,
    rate_points,
    within_completed,
)
from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.concurrency import CapacitySearchConfig
from specexp.core.schemas.slo import SloConfig
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.schemas.stats import StatsConfig
from specexp.core.slo import meets, run_goodput
from specexp.core.stats.summaries import summarize
from specexp.serving.pacing import arrival_offsets
from tests.conftest import compose_job, compose_run

pytestmark = pytest.mark.unit


def record(ttft: float, gaps: list[float], ok: bool = True, tokens: int = 0) -> RequestRecord:
    r = RequestRecord(run=0, stream=0, warmup=False, start_unix=0.0, ok=ok)
    r.ttft_s, r.itl_s = ttft, gaps
    r.e2e_s = ttft + sum(gaps)
    r.output_tokens = tokens or len(gaps) + 1
    return r


def slo(**levels) -> SloConfig:
    return SloConfig(name="test", **levels)


def test_a_request_is_good_only_when_it_meets_every_level_that_is_set():
    fast = record(0.1, [0.01] * 9)
    slow_start = record(0.5, [0.01] * 9)
    one_stall = record(0.1, [0.01] * 8 + [0.5])  # mean 0.064 s, p95 ~0.28 s
    assert meets(fast, slo(ttft_s=0.2, itl_s=0.02))
    assert not meets(slow_start, slo(ttft_s=0.2, itl_s=0.02))
    assert meets(slow_start, slo(itl_s=0.02))
    # The mean forgives one stall that a percentile of the request's own gaps does not.
    assert meets(one_stall, slo(itl_s=0.1))
    assert not meets(one_stall, slo(itl_s=0.1, itl_percentile=95))
    assert not meets(one_stall, slo(e2e_s=0.5))  # 0.1 + 0.08 + 0.5
    # A failed request meets nothing; a one-token request has no gap to miss.
    assert not meets(record(0.1, [0.01], ok=False), slo(ttft_s=1.0))
    assert meets(record(0.1, []), slo(itl_s=0.001))


def test_goodput_and_attainment_of_a_run_are_exact():
    records = [record(0.1, [0.01] * 9)] * 3 + [record(0.5, [0.01] * 9, tokens=10)]
    run = RunResult(run=0, warmup=False, wall_s=2.0, records=records)
    goodput = run_goodput(run, slo(ttft_s=0.2))
    assert goodput is not None
    assert (goodput.requests, goodput.good) == (4, 3)
    assert goodput.attainment == 0.75
    assert goodput.requests_per_s == 1.5
    assert goodput.tok_per_s == 3 * 10 / 2.0
    assert run_goodput(run, SloConfig(name="none")) is None  # nothing set, nothing computed


def test_a_job_summary_gives_attainment_and_goodput_with_their_intervals():
    def run(k: int, good: int) -> RunResult:
        records = [record(0.1, [0.01])] * good + [record(0.9, [0.01])] * (4 - good)
        return RunResult(run=k, warmup=False, wall_s=1.0, records=records)

    runs = [run(0, 4), run(1, 3), run(2, 2)]
    summary = summarize_job(
        runs,
        confidence=0.95,
        cv_warn=0.05,
        idle_timeout_s=30,
        accounting={},
        cores=2,
        slo=slo(ttft_s=0.5),
    )
    expected = summarize([1.0, 0.75, 0.5], 0.95)
    assert summary.attainment == expected
    assert summary.goodput_rps == summarize([4.0, 3.0, 2.0], 0.95)
    assert summary.metrics[f"{Metric.slo_attainment}_mean"] == 0.75
    assert summary.metrics[f"{Metric.goodput_rps}_ci_low"] == pytest.approx(
        summarize([4.0, 3.0, 2.0], 0.95).ci_low
    )
    assert summary.capacity is None


def test_an_open_loop_schedule_is_seeded_the_same_in_every_arm_and_rescaled_by_the_rate():
    level = compose_run("concurrency=poisson", "concurrency.arrivals=2000").concurrency
    typed = OmegaConf.to_object(level)
    at_two = arrival_offsets(typed, 2.0, launch=0, run=3, warmup=False)
    assert at_two == arrival_offsets(typed, 2.0, launch=0, run=3, warmup=False)
    assert at_two != arrival_offsets(typed, 2.0, launch=0, run=4, warmup=False)
    at_four = arrival_offsets(typed, 4.0, launch=0, run=3, warmup=False)
    assert all(math.isclose(a, 2 * b) for a, b in zip(at_two, at_four, strict=True))
    gaps = [b - a for a, b in zip(at_two, at_two[1:], strict=False)]
    # Poisson conditioned on its first and last arrival: the asked rate over the span,
    # exactly, with Poisson's exponential-like gaps (mean 1/rate, CV about 1) inside it.
    assert at_two[0] == 0.0 and at_two == sorted(at_two)
    assert at_two[-1] == pytest.approx(1999 / 2.0)
    assert 0.9 < statistics.stdev(gaps) / statistics.mean(gaps) < 1.1
    # Every run of 20 at 1/s is scheduled at the asked rate: 19 gaps over 19 s (a schedule
    # conditioned on its count alone, its first moved to 0, spanned 12-19.6 s: 0.97-1.5x).
    small = OmegaConf.to_object(
        compose_run("concurrency=poisson", "concurrency.arrivals=20").concurrency
    )
    for run in range(50):
        due = arrival_offsets(small, 1.0, 0, run, False)
        result = RunResult(
            run=run,
            warmup=False,
            wall_s=20.0,
            records=[
                RequestRecord(0, k, False, 0.0, due_s=t, send_lag_s=0.0) for k, t in enumerate(due)
            ],
            asked_rate=1.0,
        )
        assert result.scheduled_rate == pytest.approx(1.0)
        assert result.offered_rate == pytest.approx(1.0)
    uniform = OmegaConf.to_object(
        compose_run("concurrency=poisson", "concurrency.arrival=uniform").concurrency
    )
    assert arrival_offsets(uniform, 4.0, 0, 0, False)[:3] == [0.0, 0.25, 0.5]


def test_the_capacity_fit_reads_the_rate_the_client_offered_not_the_one_asked():
    """A client that fell behind (each send 0.1 s later than the one before) offered 2/s
    of the 4/s asked: the search's point is at 2/s; without sends the asked rate stands."""
    records = []
    for k in range(5):
        r = record(0.1, [0.01] * 3)
        r.due_s, r.send_lag_s = k * 0.25, k * 0.25
        records.append(r)
    lagging = RunResult(run=0, warmup=False, wall_s=3.0, records=records, asked_rate=4.0)
    unsent = RunResult(run=1, warmup=False, wall_s=3.0, records=[record(0.1, [])], asked_rate=4.0)
    points = rate_points([lagging, unsent], slo(ttft_s=0.2))
    assert [p.rate for p in points] == [pytest.approx(2.0), 4.0]


def test_open_loop_settings_are_checked_where_they_are_set():
    with pytest.raises(ConfigError, match="needs concurrency.rate"):
        compose_job("concurrency=poisson", "concurrency.rate=null")
    with pytest.raises(ConfigError, match="for open-loop arrivals"):
        compose_job("concurrency.rate=2")
    with pytest.raises(ConfigError, match="sets none"):
        compose_job("concurrency=capacity")
    with pytest.raises(ConfigError, match="min_rate <= start_rate"):
        CapacitySearchConfig(start_rate=5, max_rate=1)
    with pytest.raises(ConfigError, match="slo.ttft_s must be > 0"):
        compose_job("slo=interactive", "slo.ttft_s=0")
    # Service levels alone do not change what a job measures; steering a search they do.
    base = compose_job().config_fingerprint()
    assert compose_job("slo=interactive").config_fingerprint() == base
    searched = ("concurrency=capacity", "slo=interactive")
    assert (
        compose_job(*searched).config_fingerprint()
        != compose_job(*searched, "slo.ttft_s=0.3").config_fingerprint()
    )


SEARCH = CapacitySearchConfig(start_rate=1.0, min_rate=0.1, max_rate=64.0, precision=0.1)


def points(*pairs: tuple[float, float]) -> list[RatePoint]:
    return [RatePoint(rate, 100, round(100 * attained)) for rate, attained in pairs]


def test_the_search_brackets_by_doubling_or_halving_then_bisects_in_log_rate():
    assert next_rate([], SEARCH, 0.9) == 1.0
    assert next_rate(points((1, 1.0)), SEARCH, 0.9) == 2.0
    assert next_rate(points((1, 1.0), (2, 0.95)), SEARCH, 0.9) == 4.0
    assert next_rate(points((1, 0.5)), SEARCH, 0.9) == 0.5
    assert next_rate(points((0.2, 0.5)), SEARCH, 0.9) == 0.1  # never below min_rate
    assert next_rate(points((64, 1.0)), SEARCH, 0.9) == 64.0  # nor above max_rate
    assert next_rate(points((1, 1.0), (4, 0.2)), SEARCH, 0.9) == pytest.approx(2.0)
    found = bracket(points((1, 1.0), (2, 0.95), (4, 0.2), (8, 0.0)), 0.9)
    assert (found.passing, found.failing) == (2, 4)
    # Narrow: either side of the fitted capacity in turn, never at or above a failed rate.
    narrow = points((1, 1.0), (2, 0.97), (2.1, 0.85), (4, 0.1))
    fitted = estimate(narrow, 0.9).rate
    assert fitted is not None and 2 <= fitted <= 2.1
    # Four runs near it so far (an even count): the next goes below it, then one above.
    assert next_rate(narrow, SEARCH, 0.9) == pytest.approx(fitted / 1.2)
    below = [*narrow, RatePoint(fitted / 1.2, 100, 95)]
    above = next_rate(below, SEARCH, 0.9)
    assert estimate(below, 0.9).rate < above < 2.1


def test_the_search_never_goes_back_above_a_rate_that_failed():
    """capacity_gpu's none arm on the H100: met 8 and 16 req/s, failed 32, 22.6, 18.8 and
    17.4 - then jumped back to 33.2 (twice its unbounded fit). Now the runs stay inside the
    bracket, and the capacity in it has a bounded interval."""
    runs = [(8, 320), (16, 320), (32, 64), (22.6, 0), (18.8, 13), (17.4, 2)]
    searched = [RatePoint(rate, 320, good) for rate, good in runs]
    assert next_rate(searched, CapacitySearchConfig(start_rate=8.0), 0.9) < 17.4
    found = estimate(searched, 0.9)
    assert found.rate is not None and 16 <= found.rate <= 17.4
    assert found.ci_low is not None and found.ci_high is not None
    assert found.ci_low <= found.rate <= found.ci_high


def test_attainment_that_rises_again_is_said_and_the_capacity_stays_above_a_met_rate():
    """capacity_gpu's draft arm, its TPOT on the SLO's 20 ms limit: 8 req/s met 320/320,
    then 11, 52, 154 and 61 of 320 at 8.72, 9.51, 11.3 and 16. Its capacity was put at 5.59
    req/s, below the 8 it met in full, with C1 [-6.75, 13.8] s."""
    runs = [(8, 320), (8.72, 11), (9.51, 52), (11.3, 154), (16, 61)]
    found = estimate([RatePoint(rate, 320, good) for rate, good in runs], 0.9)
    assert found.rate is not None and 8 <= found.rate <= 8.72
    assert found.ci_low is not None and found.ci_high is not None
    assert found.reason is not None and "not monotone" in found.reason
    assert "11.3 req/s" in found.reason


def test_the_estimate_recovers_a_known_curve_and_says_when_it_cannot():
    # Attainment exactly logistic in log rate, through 0.9 at 3 req/s.
    slope = -5.0
    a = math.log(9) - slope * math.log(3.0)

    def attained(rate: float) -> float:
        return 1 / (1 + math.exp(-(a + slope * math.log(rate))))

    exact = [RatePoint(r, 10_000, round(10_000 * attained(r))) for r in (1, 2, 2.5, 3.5, 4, 6)]
    capacity = estimate(exact, 0.9)
    assert capacity.rate == pytest.approx(3.0, rel=0.01)
    assert capacity.ci_low < 3.0 < capacity.ci_high
    # 10,000 requests per rate, no excess in them: the interval is the assumed least excess
    # between runs (a logit sd of 0.3, 6% of the rate on this slope), not narrower.
    assert capacity.excess == pytest.approx(0.09)
    assert capacity.ci_high / capacity.ci_low < 1.3
    assert "higher" in estimate(points((1, 1.0), (2, 0.95)), 0.9).reason
    assert "lower" in estimate(points((1, 0.5), (0.5, 0.6)), 0.9).reason
    # Two rates: no curve, the bracket's log midpoint, its ends decided beyond their noise.
    two = estimate(points((1, 1.0), (2, 0.5)), 0.9)
    assert two.rate == pytest.approx(math.sqrt(2)) and (two.ci_low, two.ci_high) == (1, 2)


def curve(capacity: float, requests: int) -> list[RatePoint]:
    """A search's runs on a known logistic attainment curve (slope -6 in log rate, 90% at
    ``capacity``), each run's good requests the expected count."""
    points = []
    for factor in (0.5, 0.8, 1.0, 1.25, 2.0):
        logit = math.log(9) - 6 * math.log(factor)
        points.append(
            RatePoint(capacity * factor, requests, round(requests / (1 + math.exp(-logit))))
        )
    return points


def job_run(run_id: str, factors: dict, points: list[RatePoint]) -> JobRun:
    found = estimate(points, 0.9)
    tags = {Tag.factors: json.dumps(factors), Tag.capacity_points: capacity_points_tag(points)}
    metrics = {
        Metric.capacity_rps: found.rate,
        Metric.capacity_log_se: found.log_se,
        Metric.capacity_ci_low_rps: found.ci_low,
        Metric.capacity_ci_high_rps: found.ci_high,
        Metric.capacity_target: 0.9,
    }
    return JobRun(run_id, run_id, "FINISHED", "job", factors, tags, {}, metrics, (1.0, 2.0))


def arm(run: JobRun) -> Arm:
    return Arm(run, run.name, run.factors, summarize(run.values))


def test_capacities_are_compared_as_a_ratio_with_its_interval_and_survive_json():
    """From the searches' runs: 1.5x the capacity on curves of 1,000 requests a rate is
    shown to raise it, with the ratio inside a narrow interval; 1.05x on 24 requests a rate
    is not told apart."""
    base = arm(job_run("base", {"speculative": "none"}, curve(1.0, 1000)))
    faster = arm(job_run("fast", {"speculative": "draft"}, curve(1.5, 1000)))
    close = arm(job_run("close", {"speculative": "ngram"}, curve(1.05, 24)))
    compared = compare_capacity([(base, faster), (base, close)], confidence=0.95)
    assert compared[0].ratio == pytest.approx(1.5, rel=0.01)
    assert 1.35 < compared[0].ci_low < 1.5 < compared[0].ci_high < 1.65
    assert compared[0].verdict == CapacityVerdict.raises
    assert compared[1].verdict == CapacityVerdict.inconclusive
    assert compared[1].ci_low < 1 < compared[1].ci_high
    assert capacity_points(base.run.tags) == tuple(curve(1.0, 1000))
    assert CapacityComparison.from_json(compared[0].to_json()) == compared[0]
    report = SweepReport(
        "p",
        "llamacpp",
        "blocked",
        "speculative=none",
        0.95,
        3,
        0,
        3,
        [],
        [],
        capacities=compared,
    )
    assert SweepReport.from_json(report.to_json()) == report


def goodput_sweep(goodput: dict[tuple[str, int], list[float]]) -> list[JobRun]:
    """A concurrency sweep's job runs read for their goodput (good tok/s per run)."""
    runs = []
    for (method, streams), values in goodput.items():
        factors = {"speculative": method, "concurrency.streams": str(streams)}
        tags = {Tag.factors: json.dumps(factors), Tag.config_fingerprint: method}
        name = f"{method} {streams}"
        runs.append(JobRun.from_store(f"{method}{streams}", name, "FINISHED", tags, {}, values, []))
    return runs


def test_the_crossover_on_goodput_is_read_on_differences_and_zero_goodput_is_a_value():
    """Speculation adds 30 good tok/s at 1 stream, 10 at 4, and at 16 neither arm has a
    request within the SLO: goodput 0 in every run of both. A ratio is undefined there; the
    difference falls to 0 between 4 and 16 - where it stops paying under the SLO."""
    goodput = {
        ("none", 1): [50.0, 51.0, 49.0, 50.5],
        ("draft", 1): [80.0, 81.0, 79.0, 80.5],
        ("none", 4): [90.0, 92.0, 88.0, 91.0],
        ("draft", 4): [100.0, 102.0, 98.0, 101.0],
        ("none", 16): [0.0, 0.0, 0.0, 0.0],
        ("draft", 16): [0.0, 0.0, 0.0, 0.0],
    }
    facts = SweepFacts(
        parent_run_id="p",
        engine="llamacpp",
        order="interleaved",
        baseline="speculative=none",
        crossover_factor="concurrency.streams",
        stats=StatsConfig(),
        speculative={m: SpeculativeConfig(method=m) for m in ("none", "draft")},
    )
    tok_per_s = goodput_sweep(
        {(m, c): [v + (200 if m == "draft" else 100) for v in vs] for (m, c), vs in goodput.items()}
    )
    report = compile_sweep_report(facts, tok_per_s, [], {}, goodput_runs=goodput_sweep(goodput))
    (found,) = report.goodput_crossovers
    assert found.metric == Metric.goodput_tok_per_s and found.effect == pytest.approx(
        [30.0, 10.0, 0.0], abs=1e-9
    )
    # Both arms collapsed at 16: the crossing lies after 4 and by 16, no closer - the
    # interval says so instead of a point at 16.
    assert found.collapsed == [16] and found.estimate == pytest.approx(16.0)
    assert (found.ci_low, found.ci_high) == (4.0, 16.0)
    assert found.lowest_effect_ci[0] > 0  # it pays at 1 stream, with the interval to say so
    assert found.statement.startswith("on goodput_tok_per_s: ")
    assert "stops paying between concurrency 4 and 16 (at 16 neither arm" in found.statement
    # The tok/s crossover is its own: the draft 100 tok/s ahead everywhere, it always pays.
    assert report.crossovers[0].estimate is None
    again = SweepReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again.goodput_crossovers[0].to_json() == found.to_json()


def test_goodput_that_speculation_loses_at_the_lowest_level_is_said_with_its_interval():
    found = find_crossover(
        "draft",
        "none",
        [1, 4],
        [[10.0, 11.0, 9.0], [0.0, 0.0, 0.0]],
        [[40.0, 41.0, 39.0], [5.0, 6.0, 4.0]],
        metric=Metric.goodput_tok_per_s,
        scale=Scale.difference,
    )
    assert found.never_pays and found.estimate == 1
    assert "does not pay even at concurrency 1" in found.statement and "-30.0" in found.statement


def test_a_capacity_is_never_above_the_highest_rate_a_run_completed():
    """capacity_gpu's none arm: 18.3 req/s fitted between its last passing and first failing
    rates, above the 17.75 req/s its runs completed at most."""
    fitted = Capacity(0.9, 0.95, (), Bracket(17.0, 19.0), rate=18.3, ci_low=17.6, ci_high=18.7)
    capped = within_completed(fitted, 17.75)
    assert (capped.rate, capped.ci_low, capped.ci_high) == (17.75, 17.6, 17.75)
    assert capped.reason is not None and "fit placed the capacity at 18.3 req/s" in capped.reason
    assert within_completed(fitted, 19.0) is fitted

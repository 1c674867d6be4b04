"""The knee, over-saturation and the latency model on rate curves written out by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from specexp.analysis.arms import Arm
from specexp.analysis.capacity import ArmCapacity, CapacityComparison, compare_capacity
from specexp.analysis.results import (
    JobRun,
    Metric,
    Tag,
    capacity_points_tag,
    rate_curve,
    rate_curve_tag,
)
from specexp.analysis.summary import summarize_job
from specexp.core.capacity import estimate, rate_points
from specexp.core.load_curve import (
    CurvePoint,
    fit_latency_model,
    knee,
    model_ratio,
    oversaturated_from,
)
from specexp.core.records import structure, unstructure
from specexp.core.schemas.slo import SloConfig
from specexp.core.stats.summaries import summarize
from specexp.output.plots import latency_curve_plot
from tests.queueing import run_result

pytestmark = pytest.mark.unit

RATES = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]


def hinge(rate: float, at: float = 2.2) -> float:
    return 1 + 0.05 * rate + 0.8 * max(0.0, rate - at)


def test_the_knee_of_an_exact_hinge_is_found_inside_its_interval():
    found = knee([CurvePoint(r, hinge(r), r) for r in RATES])
    assert found.rate == pytest.approx(2.2, abs=0.05)  # the grid's spacing
    assert found.ci_low <= found.rate <= found.ci_high
    assert found.slope_below == pytest.approx(0.05, abs=0.01)
    assert found.slope_above == pytest.approx(0.85, abs=0.02)
    assert found.oversaturated_from is None
    assert found.describe().startswith("knee 2.")


def test_no_knee_is_claimed_where_latency_does_not_bend_up_or_rates_are_few():
    flat = knee([CurvePoint(r, 2.0 - 0.1 * r, r) for r in RATES])
    assert flat.rate is None and "does not bend upwards" in (flat.reason or "")
    few = knee([CurvePoint(r, hinge(r), r) for r in RATES[:3]])
    assert few.rate is None and "fewer than four" in (few.reason or "")


def test_over_saturation_starts_where_every_faster_run_fell_behind():
    points = [
        CurvePoint(1.0, 1.0, 1.0),
        CurvePoint(2.0, 1.5, 1.5),  # completed 75% of what it was offered: behind
        CurvePoint(3.0, 2.0, 2.9),  # kept up
        CurvePoint(4.0, 9.0, 2.0),
        CurvePoint(5.0, 9.0, 4.9, backlog=True),  # kept its rate, but a backlog grew
    ]
    assert oversaturated_from(points) == 4.0
    assert oversaturated_from(points[:3]) is None


def test_the_latency_model_recovers_an_m_m_1_queue_exactly():
    """M/M/1 with a 0.25 s service: mean latency 0.25 / (1 - 0.25 rate)."""
    points = [CurvePoint(r, 0.25 / (1 - 0.25 * r), r) for r in (0.5, 1.0, 2.0, 3.0)]
    points.append(CurvePoint(5.0, 20.0, 3.0))  # over-saturated: left out of the fit
    model = fit_latency_model(points)
    assert model is not None and model.runs == 4
    assert (model.c1, model.c2) == (pytest.approx(0.25, rel=1e-4), pytest.approx(0.25, rel=1e-4))
    assert model.saturation_rate == pytest.approx(4.0, rel=1e-4)
    assert model.capacity_at(0.5) == pytest.approx(2.0, rel=1e-3)
    assert model.capacity_at(0.1) is None
    assert model.relative_rmse < 1e-4
    assert "C1 0.25 s" in model.describe()


def test_lack_of_fit_is_reported_when_latency_bends_otherwise():
    """Latency as 1 / (1 - rate)^2: the model's one power cannot follow it."""
    rates = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    model = fit_latency_model([CurvePoint(r, 1 / (1 - r) ** 2, r) for r in rates])
    assert model is not None and model.lack_of_fit_p is not None
    assert model.lack_of_fit_p < 0.001
    exact = fit_latency_model([CurvePoint(r, 1 / (1 - 0.9 * r), r) for r in rates])
    assert exact is not None and exact.lack_of_fit_p is not None and exact.lack_of_fit_p > 0.5


def test_the_model_predicts_capacity_scaling_by_the_ratio_of_c2():
    base = fit_latency_model(
        [
            CurvePoint(r, 1 / (1 - r) * (1 + 0.01 * (-1) ** k), r)
            for k, r in enumerate(np.linspace(0.1, 0.7, 6))
        ]
    )
    spec = fit_latency_model(
        [
            CurvePoint(r, 0.5 / (1 - 0.6 * r) * (1 + 0.01 * (-1) ** k), r)
            for k, r in enumerate(np.linspace(0.1, 1.2, 6))
        ]
    )
    assert base is not None and spec is not None
    ratio = model_ratio(base, spec, measured=1 / 0.6, measured_log_se=0.05)
    assert ratio.predicted == pytest.approx(1 / 0.6, rel=0.05)
    assert ratio.ci_low < ratio.predicted < ratio.ci_high
    assert ratio.p_value is not None and ratio.p_value > 0.05
    off = model_ratio(base, spec, measured=3.0, measured_log_se=0.05)
    assert off.z is not None and off.z < 0 and off.p_value < 0.001
    assert math.isclose(model_ratio(base, spec).predicted, ratio.predicted)


def test_a_capacity_search_gets_its_curve_knee_and_model_and_they_reach_the_report(tmp_path):
    """Runs of an M/M/1 queue (service 0.25 s, seeded) at 0.5-4.5 req/s as a capacity
    search's: the job's summary carries the curve, knee and model; an arm read back from
    the tag compares its model's ratio; everything survives JSON; the plot is drawn."""

    slo = SloConfig(name="test", e2e_s=1.0)

    def searched(service_s: float, seed: int):
        rng = np.random.default_rng(seed)
        runs = [
            run_result(rng, 120, rate, service_s, run=k)
            for k, rate in enumerate(
                np.array([0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.5]) * 0.25 / service_s
            )
        ]
        return summarize_job(
            runs,
            confidence=0.95,
            cv_warn=0.05,
            idle_timeout_s=30,
            accounting={},
            cores=2,
            slo=slo,
            capacity_search=True,
        ), runs

    summary, runs = searched(0.25, 1)
    assert len(summary.curve) == 7
    assert summary.curve[-1].oversaturated  # 4.5/s to a server of 4/s
    assert summary.latency_model is not None
    assert summary.latency_model.c2 == pytest.approx(0.25, rel=0.3)
    assert summary.metrics[Metric.model_c2_s] == summary.latency_model.c2
    assert summary.knee is not None and summary.knee.oversaturated_from == pytest.approx(
        summary.curve[-1].rate
    )
    assert rate_curve({Tag.rate_curve: rate_curve_tag(summary.curve)}) == summary.curve

    def arm_of(name: str, service_s: float, seed: int) -> Arm:
        found, measured = searched(service_s, seed)
        tags = {
            Tag.factors: "{}",
            Tag.capacity_points: capacity_points_tag(rate_points(measured, slo)),
            Tag.rate_curve: rate_curve_tag(found.curve),
        }
        run = JobRun(name, name, "FINISHED", "job", {}, tags, {}, dict(found.metrics), (1.0, 2.0))
        return Arm(run, name, {}, summarize(run.values))

    base, spec = arm_of("base", 0.25, 2), arm_of("spec", 0.15, 3)
    read = ArmCapacity.of(base)
    assert read.latency_model is not None and read.knee is not None
    assert structure(ArmCapacity, json.loads(json.dumps(unstructure(read)))) == read
    compared = compare_capacity([(base, spec)], confidence=0.95)[0]
    assert compared.ratio is not None and compared.model is not None
    assert compared.model.predicted == pytest.approx(0.25 / 0.15, rel=0.5)
    assert compared.model.measured == compared.ratio
    assert CapacityComparison.from_json(json.loads(json.dumps(compared.to_json()))) == compared
    path = latency_curve_plot([read, ArmCapacity.of(spec)], tmp_path / "curve.png")
    assert path.stat().st_size > 10_000


def test_a_capacity_is_never_read_from_runs_whose_server_fell_behind():
    """Four servers of 1 s (4 req/s sustained) offered 1-12 req/s, 96 arrivals a run, with an
    SLO every request meets within the run: above 4 req/s the backlog only grows, so those
    runs' requests count as missing it, and the capacity lies between the fastest run that
    kept up and the slowest that did not (on the H200, a search that counted them read 23
    req/s from a server that completed 13)."""
    rng = np.random.default_rng(7)
    runs = [
        run_result(rng, 96, rate, 1.0, servers=4, run=k)
        for k, rate in enumerate([1.0, 2.0, 3.0, 6.0, 8.0, 12.0])
    ]
    lenient = SloConfig(name="test", e2e_s=1000.0)
    points = rate_points(runs, lenient)
    assert [p.good for p in points[:3]] == [96, 96, 96]
    assert [p.good for p in points[3:]] == [0, 0, 0]
    capacity = estimate(points, 0.9)
    assert capacity.rate is not None and 3.0 < capacity.rate < 6.0

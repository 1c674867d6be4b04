"""The knee, over-saturation and the latency model on rate curves written out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specexp.core.load_curve import (
    CurvePoint,
    fit_latency_model,
    knee,
    model_ratio,
    oversaturated_from,
)

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

"""Seeded Monte Carlo of the rate curve's knee and of the latency model
(specexp.core.load_curve), on curves whose truth is known: M/M/1 queues (tests/queueing.py),
whose mean latency is exactly C1 / (1 - rate C2) with C1 = C2 = the mean service, and a
two-segment line with a known hinge."""

from __future__ import annotations

import numpy as np
import pytest

from specexp.core.load_curve import CurvePoint, fit_latency_model, knee, model_ratio
from tests.queueing import mm1_mean_latencies

pytestmark = pytest.mark.statistics

UTILISATIONS = np.array([0.2, 0.35, 0.5, 0.6, 0.7, 0.8])


def fitted_arm(rng: np.random.Generator, service_s: float, searches: int):
    """Each search's six runs of 200 arrivals at the utilisations, fitted."""
    rates = UTILISATIONS / service_s
    latency = np.stack(
        [mm1_mean_latencies(rng, searches, 200, rate, service_s) for rate in rates], axis=1
    )
    return [
        fit_latency_model([CurvePoint(r, float(w), r) for r, w in zip(rates, row, strict=True)])
        for row in latency
    ]


def test_the_latency_models_intervals_cover_the_queues_constants():
    """100 pairs of searches (M/M/1, service 1 s, and 0.6 s for speculation): the 95%
    intervals cover C1 and C2 in 96.8% and 93.8% of 400 searches (SE 1.2%), the predicted
    capacity ratio (1 / 0.6) in 95.0% of 400 pairs; lack of fit is called at 5% in 5.5%.
    With this seed's 100: 95%, 92%, 96% and 4%. Asserted: coverage at least 85% (a true
    94% falls under it with probability 1e-4, SE 2.4%), lack of fit called in at most 15%."""
    rng = np.random.default_rng(7)
    base, spec = fitted_arm(rng, 1.0, 100), fitted_arm(rng, 0.6, 100)
    assert all(m is not None for m in base + spec)
    c1 = np.mean([m.c1_ci[0] <= 1.0 <= m.c1_ci[1] for m in base])
    c2 = np.mean([m.c2_ci[0] <= 1.0 <= m.c2_ci[1] for m in base])
    ratios = [model_ratio(b, s) for b, s in zip(base, spec, strict=True)]
    covered = np.mean([r.ci_low <= 1 / 0.6 <= r.ci_high for r in ratios])
    assert min(c1, c2, covered) >= 0.85
    called = np.mean([m.lack_of_fit_p is not None and m.lack_of_fit_p < 0.05 for m in base])
    assert called <= 0.15


def test_the_knee_is_found_near_a_known_hinge():
    """Eight rates, latency bending at 2.2 req/s, 5% log-normal noise per run: the knee is
    within 0.5 req/s of it in 100 of 100 searches (98% of 300 with another seed) and its
    interval covers it in 100 (99.7% of 300: the bootstrap of a hinge is conservative).
    Asserted: 90% each."""
    rng = np.random.default_rng(3)
    rates = np.array([0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0])
    truth = 1 + 0.05 * rates + 0.8 * np.maximum(0.0, rates - 2.2)
    near = covered = 0
    for _ in range(100):
        latency = truth * np.exp(rng.normal(0.0, 0.05, len(rates)))
        found = knee([CurvePoint(r, w, r) for r, w in zip(rates, latency, strict=True)])
        assert found.rate is not None and found.ci_low is not None and found.ci_high is not None
        near += abs(found.rate - 2.2) < 0.5
        covered += found.ci_low <= 2.2 <= found.ci_high
    assert near >= 90 and covered >= 90

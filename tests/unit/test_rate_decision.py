"""A capacity search's run stops sending once its attainment is decided: the sequential test
(specexp.core.capacity.RateDecision) on the run's first arrivals whose outcomes are known."""

from __future__ import annotations

from specexp.core.capacity import RateDecision
from specexp.core.measurements import RequestRecord
from specexp.core.schemas.slo import SloConfig

SLO = SloConfig(name="test", ttft_s=0.2)


def record(ttft_s: float | None) -> RequestRecord:
    """An arrival: finished with this TTFT, or (None) still running."""
    done = ttft_s is not None
    return RequestRecord(
        run=0,
        stream=0,
        warmup=False,
        start_unix=0.0,
        ok=done,
        ttft_s=ttft_s,
        e2e_s=1.0 if done else None,
    )


def test_failures_decide_at_once_and_met_waits_for_its_least_arrivals():
    decision = RateDecision(0.9, least_met=40)
    assert decision.verdict([False, False, False]) is False  # misses at twice the allowed
    assert decision.verdict([True] * 20) is None  # met, but before a queue could show
    assert decision.verdict([True] * 40) is True
    assert decision.verdict([True] * 30 + [False] * 3) is None  # 9% missed: not yet


def test_only_the_first_arrivals_all_known_count_not_the_first_to_finish():
    """Fast requests finish first: the outcomes read are those before the first arrival
    still running, so a slow (missing) request in flight holds back a 'met'."""
    decision = RateDecision(0.9, least_met=20)
    met = [record(0.1)] * 30
    assert decision.decided(met, SLO)
    assert not decision.decided([record(0.1)] * 10 + [record(None)] + [record(0.1)] * 30, SLO)
    assert decision.decided([record(0.5)] * 3 + [record(None)], SLO)  # three misses: failed

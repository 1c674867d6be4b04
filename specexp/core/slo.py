"""Service levels read off measured requests: which requests met every SLO that is set, and
what a run's goodput and attainment are. Pure: records in, figures out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.schemas.slo import SloConfig


def request_itl_s(record: RequestRecord, slo: SloConfig) -> Optional[float]:
    """The request's inter-token latency as the SLO reads it: the mean of its gaps, or the
    configured percentile of them; None for a request of one token (no gap to meet)."""
    if not record.itl_s:
        return None
    if slo.itl_percentile is None:
        return float(np.mean(record.itl_s))
    return float(np.percentile(record.itl_s, slo.itl_percentile))


def meets(record: RequestRecord, slo: SloConfig) -> bool:
    """Whether one request met every SLO that is set; a failed request meets none."""
    if not record.ok:
        return False
    if slo.ttft_s is not None and (record.ttft_s is None or record.ttft_s > slo.ttft_s):
        return False
    if slo.e2e_s is not None and (record.e2e_s is None or record.e2e_s > slo.e2e_s):
        return False
    if slo.itl_s is not None:
        itl = request_itl_s(record, slo)
        if itl is not None and itl > slo.itl_s:
            return False
    return True


@dataclass(frozen=True)
class Goodput:
    """One run against the SLO: its requests, those that met it, and per second of the run
    (its wall time, the drain after the last arrival included) how many and their tokens."""

    requests: int
    good: int
    wall_s: float
    good_tokens: int

    @property
    def attainment(self) -> float:
        return self.good / self.requests if self.requests else 0.0

    @property
    def requests_per_s(self) -> float:
        return self.good / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def tok_per_s(self) -> float:
        return self.good_tokens / self.wall_s if self.wall_s > 0 else 0.0


def run_goodput(result: RunResult, slo: SloConfig) -> Optional[Goodput]:
    """The run's goodput against ``slo``; None when the SLO sets nothing."""
    if not slo.defined:
        return None
    good = [r for r in result.records if meets(r, slo)]
    return Goodput(
        requests=len(result.records),
        good=len(good),
        wall_s=result.wall_s,
        good_tokens=sum(r.output_tokens or 0 for r in good),
    )

"""Whether an open-loop run was what it claims: its steady-state window and Little's law in it.

The window trims the run's warm-up and cool-down by MSER-5 (White, 1997; Franklin & White,
2008): per-request latency (from each request's due time) in order of arrival, in batches of
five, cut where the standard error of the remaining batches' mean is least - from the front
for the warm-up, then from the back of what is left for the cool-down, at most half in all.

In the window, Little's law says the time-average number of requests in flight equals the
arrival rate times their mean latency (L = lambda W). Over a finite window the two differ by
the requests that straddle its edges; in a steady state those in at its start and those in
at its end balance. A server that queues more than it serves leaves a growing backlog at the
window's end, so L falls short of lambda W; a client that cannot keep its schedule sends late.
Either fails the check, and the run is flagged with the likely cause. Pure: records in.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Optional

import numpy as np

from specexp.core.measurements import RunResult

MSER_BATCH = 5
# The window's L and lambda W may differ by this share of the larger before the run is
# flagged: edge effects of a steady window of 20+ requests stay well inside it
# (tests/statistics/test_steady.py).
LITTLE_TOLERANCE = 0.2
# A client whose 90th-percentile send lag exceeds this share of the mean gap between
# arrivals did not keep its schedule.
CLIENT_LAG_SHARE = 0.5
# Fewer requests in the window than this: no check.
MIN_WINDOW_REQUESTS = 20

RULE = "MSER-5 on per-request latency from its due time, warm-up then cool-down, <= half in all"


class SteadyVerdict(StrEnum):
    steady = "steady"
    client_saturated = "client saturated"  # sent late: the offered load was not the asked
    server_queueing = "server queueing outside the window"  # L short of lambda W: a backlog
    too_few = "too few requests to check"


@dataclass(frozen=True)
class SteadyState:
    """An open-loop run's steady window (seconds after its start, by due time), the requests
    due in it, and Little's law there: the time-average in flight, and lambda W."""

    start_s: float
    end_s: float
    requests: int
    trimmed_front: int
    trimmed_back: int
    arrival_rate: float
    latency_s: float
    in_flight: float
    verdict: SteadyVerdict

    @property
    def predicted_in_flight(self) -> float:
        """lambda W: what Little's law says is in flight."""
        return self.arrival_rate * self.latency_s

    @property
    def little_ratio(self) -> float:
        """Observed in flight over lambda W (1 in a steady state)."""
        return self.in_flight / self.predicted_in_flight if self.predicted_in_flight else 0.0

    @property
    def ok(self) -> bool:
        return self.verdict == SteadyVerdict.steady

    @property
    def flagged(self) -> bool:
        """Checked and failed (a run too short to check is neither steady nor flagged)."""
        return self.verdict in (SteadyVerdict.client_saturated, SteadyVerdict.server_queueing)

    def describe(self) -> str:
        return (
            f"{self.verdict}: window {self.start_s:.3g}-{self.end_s:.3g} s ({self.requests} "
            f"requests; {RULE}), in flight {self.in_flight:.3g} against lambda W "
            f"{self.predicted_in_flight:.3g}"
        )


def mser_truncation(values: np.ndarray, batch: int = MSER_BATCH, most: Optional[int] = None) -> int:
    """MSER-``batch``: how many leading values to drop - batch means, and the cut (at most
    half of them, and at most ``most`` values) minimising the sum of squared deviations of
    the rest over its count squared; a whole number of batches."""
    count = len(values) // batch
    if count < 4:
        return 0
    limit = count // 2 if most is None else min(count // 2, most // batch)
    means = np.asarray(values[: count * batch], dtype=float).reshape(count, batch).mean(axis=1)
    kept = np.arange(count, 0, -1, dtype=float)  # batches left after cutting d = 0, 1, ...
    total = np.cumsum(means[::-1])[::-1]
    squares = np.cumsum((means**2)[::-1])[::-1]
    statistic = (squares - total**2 / kept) / kept**2
    cut = int(np.argmin(statistic[: limit + 1]))
    return cut * batch


def in_flight_area(start: np.ndarray, end: np.ndarray, low: float, high: float) -> float:
    """The integral over [low, high] of how many of the intervals [start, end) hold."""
    return float(np.clip(np.minimum(end, high) - np.maximum(start, low), 0.0, None).sum())


def steady_state(
    run: RunResult,
    tolerance: float = LITTLE_TOLERANCE,
    lag_share: float = CLIENT_LAG_SHARE,
) -> Optional[SteadyState]:
    """The run's steady window and Little's law in it; None for a closed-loop run. A request
    is in flight from its due time until its last token (one that failed, until the run's
    end); its latency counts from its due time, as the SLO's do."""
    timed = sorted(
        ((r.due_s, r) for r in run.records if r.due_s is not None),
        key=lambda pair: (pair[0], pair[1].stream),
    )
    if run.asked_rate is None or len(timed) < 2:
        return None
    due = np.array([t for t, _ in timed], dtype=float)
    latency = np.array(
        [r.e2e_s if r.ok and r.e2e_s is not None else run.wall_s - t for t, r in timed],
        dtype=float,
    )
    front = mser_truncation(latency)
    back = mser_truncation(latency[front:][::-1], most=len(timed) // 2 - front)
    window = slice(front, len(timed) - back)
    # [first due, last due): the requests due in it are all but the last of the window's.
    low, high = float(due[window][0]), float(due[window][-1])
    arrivals = len(due[window]) - 1
    span = high - low
    lags = np.array([r.send_lag_s for _, r in timed if r.send_lag_s is not None], dtype=float)
    mean_gap = (due[-1] - due[0]) / (len(due) - 1)
    if arrivals < MIN_WINDOW_REQUESTS or span <= 0:
        return SteadyState(
            low, high, max(arrivals, 0), front, back, 0.0, 0.0, 0.0, SteadyVerdict.too_few
        )
    rate = arrivals / span
    mean_latency = float(latency[window][:-1].mean())
    in_flight = in_flight_area(due, due + latency, low, high) / span
    predicted = rate * mean_latency
    if lags.size and float(np.percentile(lags, 90)) > lag_share * mean_gap:
        verdict = SteadyVerdict.client_saturated
    elif abs(in_flight - predicted) > tolerance * max(in_flight, predicted):
        verdict = SteadyVerdict.server_queueing
    else:
        verdict = SteadyVerdict.steady
    return SteadyState(low, high, arrivals, front, back, rate, mean_latency, in_flight, verdict)

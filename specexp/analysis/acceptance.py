"""Acceptance per draft position, from each engine's own counts: the marginal rate (the
share of drafts whose first i+1 tokens were all accepted) and the conditional rate (that
share among the drafts whose first i were), each with a Wilson interval; the mean acceptance
length per verification step and per request; the identity that ties them,
AL = 1 + sum of the marginal rates, checked on every run; and the whole written as NVIDIA
specdec_bench's ``speculation_profile.json`` (schema 1.0).

Where the counts come from:

- vLLM and llama.cpp: Prometheus counters, read as deltas over each run (drafts, draft tokens,
  accepted tokens, and accepted tokens per position: a draft that had its first k tokens
  accepted adds one to positions 0..k-1).
- SGLang: each request's ``spec_accept_histogram`` (verification steps that accepted exactly
  n draft tokens, n = 0, 1, ...), where its version sends one.

Per request, the mean acceptance length is the tokens after the first over the target's
steps after the first: SGLang counts its verification steps; llama.cpp's timings give the
draft tokens accepted, and each of its steps makes one token of its own, so the steps are the
tokens less those accepted. vLLM says nothing per request.

Beside the profile: a synthetic-acceptance arm's realised acceptance against the length it
pinned (:func:`check_pinned`), and a speculative arm's speed-up as a share of Leviathan et
al.'s bound tau / (gamma c + 1) with the loss that limits it (:func:`efficiency`).

Nothing here does I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm, t

from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.notes import Note, NoteKind
from specexp.core.schemas.speculative import SpeculativeMethod
from specexp.engines.prometheus import ACCEPTED_AT_POSITION

SCHEMA_VERSION = "1.0"  # specdec_bench's speculation_profile.json
# |1 + sum of marginals - AL| allowed before a record is flagged (specdec_bench's own): the
# counters are read one after another while the server may still be counting its last step.
IDENTITY_TOLERANCE = 0.02
# Draft lengths that are a prefix of the longer ones, so the marginals extrapolate over K.
_CHAIN_METHODS = (SpeculativeMethod.draft, SpeculativeMethod.eagle3)


@dataclass(frozen=True)
class PositionCounts:
    """Draft-level counts over some verification steps."""

    drafts: float  # verification steps that checked a draft
    accepted: float  # draft tokens accepted
    # Per position i (from 0): drafts whose first i+1 tokens were all accepted.
    accepted_at: tuple[float, ...]
    draft_tokens: Optional[float] = None

    @classmethod
    def from_counters(cls, deltas: Mapping[str, float]) -> Optional[PositionCounts]:
        """From a run's counter deltas (Engine.speculative_counters' names); None when the
        server drafted nothing or keeps no per-position counter."""
        positions = sorted(
            int(name.removeprefix(ACCEPTED_AT_POSITION))
            for name in deltas
            if name.startswith(ACCEPTED_AT_POSITION)
        )
        if not deltas.get("drafts") or not positions:
            return None
        at = [0.0] * (positions[-1] + 1)
        for i in positions:
            at[i] = deltas[f"{ACCEPTED_AT_POSITION}{i}"]
        return cls(
            deltas["drafts"],
            deltas.get("accepted_tokens", 0.0),
            tuple(at),
            deltas.get("draft_tokens"),
        )

    @classmethod
    def from_histogram(cls, histogram: Sequence[float]) -> Optional[PositionCounts]:
        """From steps that accepted exactly n draft tokens (``histogram[n]``)."""
        drafts = float(sum(histogram))
        if not drafts:
            return None
        at = tuple(float(sum(histogram[i + 1 :])) for i in range(len(histogram) - 1))
        return cls(drafts, float(sum(n * h for n, h in enumerate(histogram))), at)

    def __add__(self, other: PositionCounts) -> PositionCounts:
        size = max(len(self.accepted_at), len(other.accepted_at))
        at = [0.0] * size
        for counts in (self, other):
            for i, value in enumerate(counts.accepted_at):
                at[i] += value
        tokens = (
            None
            if self.draft_tokens is None or other.draft_tokens is None
            else self.draft_tokens + other.draft_tokens
        )
        return PositionCounts(
            self.drafts + other.drafts, self.accepted + other.accepted, tuple(at), tokens
        )

    @property
    def acceptance_length(self) -> float:
        """Mean tokens per verification step: the accepted drafts and the target's own."""
        return 1.0 + self.accepted / self.drafts

    def marginals(self, positions: int) -> list[float]:
        """P(first i+1 draft tokens accepted), i < ``positions`` (missing positions: 0)."""
        return [self.at(i) / self.drafts for i in range(positions)]

    def at(self, i: int) -> float:
        return self.accepted_at[i] if i < len(self.accepted_at) else 0.0

    def histogram(self, positions: int) -> dict[int, float]:
        """Verification steps by acceptance length (accepted drafts + 1, as specdec_bench
        keys it), lengths 1 .. positions + 1."""
        reached = [self.drafts] + [self.at(i) for i in range(positions)] + [0.0]
        return {k + 1: reached[k] - reached[k + 1] for k in range(positions + 1)}


@dataclass(frozen=True)
class Rate:
    """A share with its Wilson interval: ``successes`` of ``trials``."""

    value: float
    low: float
    high: float
    successes: float
    trials: float

    @classmethod
    def of(cls, successes: float, trials: float, confidence: float) -> Rate:
        if not trials:
            return cls(0.0, 0.0, 1.0, successes, trials)
        from statsmodels.stats.proportion import proportion_confint  # noqa: PLC0415 (DEFERRED)

        # More successes than trials: malformed counts (the monotonicity check says so).
        low, high = proportion_confint(
            min(round(successes), round(trials)),
            round(trials),
            alpha=1 - confidence,
            method="wilson",
        )
        return cls(successes / trials, float(low), float(high), successes, trials)


@dataclass(frozen=True)
class IdentityCheck:
    """AL against 1 + the sum of the marginal rates: equal when every position is counted
    once; less when positions went uncounted (a draft deeper than the vector)."""

    implied: float
    reported: float
    tolerance: float = IDENTITY_TOLERANCE

    @property
    def delta(self) -> float:
        return abs(self.implied - self.reported)

    @property
    def passed(self) -> bool:
        return self.delta <= self.tolerance

    def to_json(self) -> dict[str, Any]:
        """specdec_bench's ``mean_consistency``."""
        return {
            "implied_mean_accept_length": round(self.implied, 6),
            "reported_mean_accept_length": round(self.reported, 6),
            "abs_delta": round(self.delta, 6),
            "tolerance": self.tolerance,
            "passed": self.passed,
        }


def identity(counts: PositionCounts, positions: int) -> IdentityCheck:
    return IdentityCheck(1.0 + sum(counts.marginals(positions)), counts.acceptance_length)


@dataclass(frozen=True)
class AcceptanceProfile:
    """A job's acceptance, position by position, over its measured runs."""

    positions: int  # the draft length asked for (K)
    counts: PositionCounts
    source: str  # where the counts came from
    confidence: float
    marginal: tuple[Rate, ...]
    conditional: tuple[Rate, ...]
    identity: IdentityCheck
    # Mean acceptance length per request (tokens after the first over the target's steps
    # after the first), and the requests it is the mean of; None where the engine does not
    # say per request.
    per_request: Optional[float] = None
    requests: int = 0
    # Measured runs whose own counts fail the identity, with what they gave.
    failed_runs: tuple[tuple[int, IdentityCheck], ...] = ()

    @property
    def acceptance_length(self) -> float:
        return self.counts.acceptance_length

    @property
    def monotone(self) -> list[dict[str, float]]:
        """Positions whose marginal rises over the one before (a survival function cannot):
        the counts are malformed."""
        values = [r.value for r in self.marginal]
        return [
            {"position": i, "value": values[i], "previous": values[i - 1]}
            for i in range(1, len(values))
            if values[i] > values[i - 1] + 1e-9
        ]

    def notes(self) -> list[Note]:
        notes = []
        if not self.identity.passed:
            notes.append(Note(NoteKind.acceptance_identity, self._identity_message("the job")))
        for run, check in self.failed_runs:
            notes.append(
                Note(NoteKind.acceptance_identity, self._identity_message(f"run {run}", check))
            )
        return notes

    def _identity_message(self, what: str, check: Optional[IdentityCheck] = None) -> str:
        check = check or self.identity
        return (
            f"acceptance counts of {what} fail AL = 1 + sum of per-position rates: "
            f"{check.reported:.3f} counted, {check.implied:.3f} from {self.positions} positions "
            f"({self.source}); a position went uncounted or the counters were read mid-step"
        )

    def to_json(
        self,
        method: str,
        target_model: Optional[str] = None,
        draft_model: Optional[str] = None,
        conditions: Optional[Mapping[str, Any]] = None,
    ) -> dict[str, Any]:
        """specdec_bench's ``speculation_profile.json`` (schema 1.0), its field names and
        conventions; what specexp adds (intervals, counts, per-run checks) under
        ``specexp``."""
        length = round(self.acceptance_length, 6)
        histogram = self.counts.histogram(self.positions)
        return {
            "schema_version": SCHEMA_VERSION,
            "measured": True,
            "method": method,
            "draft_checkpoint": {"id": checkpoint_id(draft_model)} if draft_model else None,
            "target_model": {"id": checkpoint_id(target_model)} if target_model else None,
            "num_speculative_tokens": self.positions,
            "block_size": None,
            "max_supported_k": self.positions,
            "verification_method": "longest_prefix",
            "conditional_accept_rates": [round(r.value, 6) for r in self.conditional],
            "marginal_accept_rates": [round(r.value, 6) for r in self.marginal],
            "mean_accept_length": length,
            "mean_accept_length_per_request": None
            if self.per_request is None
            else round(self.per_request, 6),
            "accept_length_model": "chain_analytic"
            if method in _CHAIN_METHODS
            else "measured_per_k",
            "accept_length_by_k": {str(self.positions): length},
            "acceptance_length_histogram": {str(k): v for k, v in histogram.items()},
            "per_category": None,
            "measurement_conditions": dict(conditions or {}),
            "validation": {
                "mean_consistency": self.identity.to_json(),
                "marginal_monotonicity": {
                    "passed": not self.monotone,
                    "violations": self.monotone,
                },
            },
            "specexp": {
                "source": self.source,
                "confidence": self.confidence,
                "drafts": self.counts.drafts,
                "draft_tokens": self.counts.draft_tokens,
                "accepted_tokens": self.counts.accepted,
                "accepted_at_position": list(self.counts.accepted_at),
                "marginal_intervals": [[r.low, r.high] for r in self.marginal],
                "conditional_intervals": [[r.low, r.high] for r in self.conditional],
                "per_request_requests": self.requests,
                "failed_runs": [{"run": run, **check.to_json()} for run, check in self.failed_runs],
            },
        }


def checkpoint_id(path: str) -> str:
    """The last two components of a model's path (``org/model``): a published profile
    carries no local directory layout."""
    parts = [p for p in str(path).replace("\\", "/").split("/") if p]
    return "/".join(parts[-2:])


def per_request_length(record: RequestRecord) -> Optional[float]:
    """One request's mean acceptance length: its tokens after the first over the target's
    steps after the first (SGLang's verification steps; llama.cpp's tokens less the drafts
    accepted, each step making one of its own); None when it does not say."""
    spec, tokens = record.speculative, record.output_tokens
    if not record.ok or not tokens or tokens < 2:
        return None
    if spec.get("spec_verify_steps"):
        return (tokens - 1) / spec["spec_verify_steps"]
    if "spec_accepted_tokens" in spec:
        steps = tokens - 1 - int(spec["spec_accepted_tokens"])
        return (tokens - 1) / steps if steps > 0 else None
    return None


def _run_counts(run: RunResult) -> tuple[Optional[PositionCounts], str]:
    counted = PositionCounts.from_counters(run.counter_deltas)
    if counted is not None:
        return counted, "the server's per-position counters"
    total: Optional[PositionCounts] = None
    for record in run.records:
        histogram = record.speculative.get("spec_accept_histogram")
        if record.ok and histogram:
            counts = PositionCounts.from_histogram(histogram)
            if counts is not None:
                total = counts if total is None else total + counts
    return total, "each request's acceptance histogram"


def profile(
    measured: Sequence[RunResult], positions: int, confidence: float
) -> Optional[AcceptanceProfile]:
    """The acceptance profile of a job's measured runs, draft length ``positions``; None
    when no run has per-position counts (no speculation, or an engine that keeps none)."""
    total: Optional[PositionCounts] = None
    source = ""
    failed = []
    for run in measured:
        counts, source_of_run = _run_counts(run)
        if counts is None:
            continue
        source = source_of_run
        total = counts if total is None else total + counts
        check = identity(counts, positions)
        if not check.passed:
            failed.append((run.run, check))
    if total is None:
        return None
    reached = [total.drafts] + [total.at(i) for i in range(positions)]
    per_request = [
        length for run in measured for r in run.records if (length := per_request_length(r))
    ]
    return AcceptanceProfile(
        positions=positions,
        counts=total,
        source=source,
        confidence=confidence,
        marginal=tuple(Rate.of(reached[i + 1], total.drafts, confidence) for i in range(positions)),
        conditional=tuple(
            Rate.of(reached[i + 1], reached[i], confidence) for i in range(positions)
        ),
        identity=identity(total, positions),
        per_request=sum(per_request) / len(per_request) if per_request else None,
        requests=len(per_request),
        failed_runs=tuple(failed),
    )


@dataclass(frozen=True)
class PinnedCheck:
    """A synthetic-acceptance arm's realised acceptance against the one pinned: the mean
    length with its interval (normal, from the spread of the draws: a synthetic arm's
    acceptance is drawn afresh at every step), and each position whose marginal's interval
    excludes the rate the engine's schedule pins there."""

    pinned: float  # acceptance length asked for, the target's token included
    realised: float
    low: float
    high: float
    # Positions (from 0) whose realised marginal disagrees with the pinned one.
    positions_off: tuple[int, ...] = ()

    @property
    def agrees(self) -> bool:
        return self.low <= self.pinned <= self.high and not self.positions_off

    def describe(self) -> str:
        verdict = "as pinned" if self.agrees else "NOT as pinned"
        off = (
            f"; position(s) {', '.join(str(p) for p in self.positions_off)} off their pinned rate"
            if self.positions_off
            else ""
        )
        return (
            f"acceptance length {self.realised:.3f} [{self.low:.3f}, {self.high:.3f}] against "
            f"{self.pinned:g} pinned: {verdict}{off}"
        )


def check_pinned(
    counts: PositionCounts,
    positions: int,
    pinned: float,
    confidence: float,
    pinned_marginals: Optional[Sequence[float]] = None,
) -> PinnedCheck:
    """The realised acceptance of ``counts`` against the pinned length (and, where the
    engine's schedule is known, its per-position marginals)."""
    histogram = counts.histogram(positions)
    n = counts.drafts
    mean = sum(k * h for k, h in histogram.items()) / n
    variance = sum((k - mean) ** 2 * h for k, h in histogram.items()) / max(n - 1, 1)
    half = float(norm.ppf(0.5 + confidence / 2)) * math.sqrt(variance / n)
    # A deterministic schedule (an integer length) draws nothing: equality, to rounding.
    half = max(half, 1e-9)
    off = []
    for i, rate in enumerate(pinned_marginals or ()):
        realised = Rate.of(counts.at(i), n, confidence)
        if not realised.low - 1e-9 <= rate <= realised.high + 1e-9:
            off.append(i)
    return PinnedCheck(pinned, mean, mean - half, mean + half, tuple(off))


def tokens_per_step(alpha: float, gamma: int) -> float:
    """Leviathan et al.'s tokens per target step, tau = (1 - alpha^(gamma+1)) / (1 - alpha):
    each of ``gamma`` drafted tokens accepted with probability ``alpha``, in order."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def alpha_for_length(length: float, gamma: int) -> float:
    """The per-token acceptance alpha whose tau is ``length`` (the measured mean acceptance
    length). Not the share of drafted tokens accepted: that is E[accepted] / gamma, which the
    order of acceptance (a rejection ends the draft) keeps below alpha."""
    if length <= 1.0:
        return 0.0
    if length >= gamma + 1.0:
        return 1.0
    return float(brentq(lambda a: tokens_per_step(a, gamma) - length, 0.0, 1.0))


class Limit(StrEnum):
    """What costs a speculative arm most of its ideal speed-up, gamma + 1."""

    acceptance = "acceptance"
    draft_cost = "draft cost"
    overhead = "overhead beyond both"
    # Without the draft's own step time its cost sits inside "the rest".
    cost_or_overhead = "draft cost or overhead (c not measured: not told apart)"


@dataclass(frozen=True)
class Efficiency:
    """A speculative arm's measured speed-up over its baseline as a share of the bound
    tau / (gamma c + 1): tau its measured acceptance length, c its draft's step time over
    the target's (each served alone, at the same level). The ideal gamma + 1 splits into
    three losses that multiply back to the measured speed-up - acceptance, (gamma + 1) / tau;
    draft cost, gamma c + 1; and the rest, bound / measured - and ``limit`` names the largest."""

    DERIVED = ("limit",)

    baseline: str
    candidate: str
    candidate_run_id: str
    gamma: int
    tau: float
    alpha: float
    # None: not measured (no arm serves the draft alone); the bound is then taken at c = 0.
    cost: Optional[float]
    cost_source: str
    speedup: float
    share: float
    low: float
    high: float
    confidence: float

    @property
    def bound(self) -> float:
        return self.tau / (self.gamma * (self.cost or 0.0) + 1.0)

    @property
    def losses(self) -> dict[Limit, float]:
        return {
            Limit.acceptance: (self.gamma + 1.0) / self.tau,
            Limit.draft_cost: self.gamma * (self.cost or 0.0) + 1.0,
            Limit.overhead: 1.0 / self.share,
        }

    @property
    def limit(self) -> Limit:
        losses = self.losses
        largest = max(losses, key=lambda k: losses[k])
        if self.cost is None and largest != Limit.acceptance:
            return Limit.cost_or_overhead
        return largest

    def sentence(self) -> str:
        cost = (
            f"c = {self.cost:.3f} ({self.cost_source})"
            if self.cost is not None
            else f"c not measured ({self.cost_source}): bound at c = 0"
        )
        losses = self.losses
        return (
            f"{self.candidate} vs {self.baseline}: x{self.speedup:.3f} of a bound x{self.bound:.3f} "
            f"= {self.share:.0%} [{self.low:.0%}, {self.high:.0%}] (gamma {self.gamma}, tau "
            f"{self.tau:.2f}, alpha {self.alpha:.2f}, {cost}); limited by {self.limit}: of the "
            f"ideal x{self.gamma + 1}, acceptance costs x{losses[Limit.acceptance]:.2f}, "
            + (
                f"draft cost x{losses[Limit.draft_cost]:.2f}, the rest "
                if self.cost is not None
                else "the rest (draft cost included) "
            )
            + f"x{losses[Limit.overhead]:.2f}"
        )

    def metrics(self) -> dict[str, float]:
        """On the candidate's run: the bound and the share of it reached, with the interval."""
        return {
            "speedup_bound": self.bound,
            "bound_share_pct": 100 * self.share,
            "bound_share_ci_low_pct": 100 * self.low,
            "bound_share_ci_high_pct": 100 * self.high,
        }


def log_mean_se(values: Sequence[float]) -> float:
    """Standard error of the mean of log ``values``: the relative error of an arm's mean."""
    logs = np.log(np.asarray(values, dtype=float))
    return float(logs.std(ddof=1) / math.sqrt(len(logs))) if len(logs) > 1 else math.inf


def efficiency(
    *,
    baseline: str,
    candidate: str,
    candidate_run_id: str,
    gamma: int,
    tau: float,
    speedup: float,
    speedup_log_se: float,
    df: float,
    confidence: float,
    cost: Optional[tuple[float, float, float]] = None,
    cost_source: str = "",
) -> Efficiency:
    """The arm's share of the bound, with a delta-method interval on the log scale. Its
    errors: the speed-up's (``speedup_log_se``, its comparison's, on ``df`` degrees of
    freedom) and c's - ``cost`` is c, then the standard errors of the log means of the
    baseline and of the draft served alone. The baseline's error enters both the speed-up
    and c, and partly cancels: log share = log cand - (1 - w) log base - w log draft + const,
    w = gamma c / (gamma c + 1). tau is counted over every draft of the arm and taken as
    known."""
    c, base_se, draft_se = cost if cost is not None else (None, 0.0, 0.0)
    bound = tau / (gamma * (c or 0.0) + 1.0)
    share = speedup / bound
    w = gamma * (c or 0.0) / (gamma * (c or 0.0) + 1.0)
    variance = speedup_log_se**2 + w**2 * (base_se**2 + draft_se**2) - 2 * w * base_se**2
    se = math.sqrt(max(variance, 0.0))
    quantile = (
        float(t.ppf(0.5 + confidence / 2, df)) if df > 0 else float(norm.ppf(0.5 + confidence / 2))
    )
    return Efficiency(
        baseline,
        candidate,
        candidate_run_id,
        gamma,
        tau,
        alpha_for_length(tau, gamma),
        c,
        cost_source,
        speedup,
        share,
        share * math.exp(-quantile * se),
        share * math.exp(quantile * se),
        confidence,
    )

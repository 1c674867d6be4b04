"""Typed notes: what a warning or caveat says, as a kind a program can act on and a message
a person can read. Measurements, statistics and reports carry these, never bare strings."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class NoteKind(StrEnum):
    """What a note says: why a set of measured values is not to be trusted as it is, or how
    a comparison was made and what limits its verdict."""

    high_cv = "high CV"
    trend = "trend"
    outlier = "outlier"
    few_values = "few values"
    # Of a comparison.
    cannot_test = "cannot test"
    below_threshold = "below threshold"
    rank_disagrees = "rank test disagrees"
    undetectable = "undetectable"
    drift_fitted = "time drift"
    confounded = "confounded"
    blocked_order = "blocked order"
    step = "step"
    autocorrelated = "autocorrelated"
    one_server = "one server"
    launches_only = "these launches only"
    launch_variance = "launch variance"
    calibration_refused = "calibration not used"
    stack_drift = "stack drift"
    not_engaged = "not engaged"
    repetitions = "repetitions"
    sequential = "sequential"
    robust = "robust test"
    outputs_differ = "outputs differ"
    # Of a report.
    no_baseline = "no baseline"
    left_out = "left out"
    # Of a job's measured runs.
    busy_server = "busy server"
    busy_machine = "busy machine"
    gpu_throttled = "GPU throttled"
    gpu_shared = "GPU shared"
    token_count = "token count"
    overloaded = "overloaded"  # open-loop requests that stalled in the server's queue
    # Acceptance counts that fail AL = 1 + sum of per-position rates (analysis.acceptance).
    acceptance_identity = "acceptance identity"
    # A synthetic-acceptance arm whose realised acceptance is not the pinned one.
    synthetic_acceptance = "synthetic acceptance"
    few_requests = "few requests"  # too few for a percentile's interval: not reported
    not_steady = "not steady"  # an open-loop run failed Little's law in its steady window


# What a run could not have (not what makes its figures doubtful): said as a note, not a
# warning.
_INFORMATIONAL = frozenset({NoteKind.few_requests})


@dataclass(frozen=True)
class Note:
    kind: NoteKind
    message: str

    @property
    def doubtful(self) -> bool:
        """The note casts doubt on the figures (a warning), rather than saying what they
        lack."""
        return self.kind not in _INFORMATIONAL

    def __str__(self) -> str:
        return self.message

"""Reproduction of published results: runs mapped to a reference's published points (by
their reference_point tag), and each published claim judged as one family - on the
reference's hardware against the published ratio and its own noise, on other hardware by
direction only, the runs standing in for the published points.

Look here for what ``specexp compare --reference`` says of each claim (reproduced,
contradicted, inconclusive, not measured) and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Iterable, Mapping, Optional, Sequence, TypeVar

from scipy import stats as scipy_stats

from specexp.analysis.arms import Arm
from specexp.analysis.calibration import Calibration, account_for_launches
from specexp.analysis.results import Tag
from specexp.analysis.timeline import time_drift
from specexp.core.stats.comparison import Comparison, compare, decide
from specexp.core.stats.verdicts import Verdict


class ClaimStatus(StrEnum):
    """What the measurements say of a published claim."""

    reproduced = "reproduced"
    contradicted = "contradicted"
    inconclusive = "inconclusive"
    not_measured = "not measured"


def hardware_matches(reference: Any, arms: Sequence[Arm]) -> tuple[bool, str]:
    wanted = reference.hardware
    measured = sorted({a.run.tags.get(Tag.hardware, "unknown") for a in arms})
    same = bool(arms) and all(
        wanted.gpu in a.run.tags.get(Tag.gpu_name, "")
        and a.run.tags.get(Tag.gpu_count) == str(wanted.gpu_count)
        for a in arms
    )
    return same, ", ".join(measured)


@dataclass
class ClaimCheck:
    id: str
    text: str
    published_ratio: float
    comparison: Optional[Comparison]
    status: ClaimStatus
    # Interval of measured / published ratio, with the published figures' own noise and
    # simultaneous over the claims measured: "contradicted" exactly when it excludes 1.
    agreement_low: Optional[float] = None
    agreement_high: Optional[float] = None
    # With one launch per arm and no launch variance known: what the runs say of these
    # launches, kept apart; the status is then inconclusive.
    within_launch: Optional[ClaimStatus] = None


# What a published point is made of: a claim between points that differ in one of these
# alone is about that change.
_POINT_SETTINGS = ("stack", "attention_backend", "allreduce_backend", "speculative")


def _stack_of(arm: Arm) -> str:
    """The stack an arm's runs were served by, with the engine's release where it was read
    (its version up to what it adds in parentheses)."""
    tags = arm.run.tags
    version = tags.get(Tag.engine_version)
    release = f" ({version.split(' (')[0]})" if version else ""
    return f"{tags.get(Tag.stack, 'unknown')}{release}"


_ONE_STACK = (
    "not judged: both sides ran {stack}, and the claim is about a change of stack (the "
    "older stack's stand-in did not reach its runs)"
)


def _one_stack_for_two(reference: Any, claim: Any, base: Arm, cand: Arm) -> bool:
    """The claim's points differ in stack, and its two stand-ins ran the same one."""
    points = reference.points[claim.baseline], reference.points[claim.candidate]
    stack = base.run.tags.get(Tag.stack)
    return (
        points[0].get("stack") != points[1].get("stack")
        and stack is not None
        and stack == cand.run.tags.get(Tag.stack)
    )


def _stand_in_scope(reference: Any, claim: Any, by_point: Mapping[str, Optional[Arm]]) -> str:
    """What a claim's runs on other hardware than the reference's can say of it."""
    base, cand = by_point.get(claim.baseline), by_point.get(claim.candidate)
    if base is None or cand is None:
        missing = [p for p in (claim.baseline, claim.candidate) if by_point.get(p) is None]
        return f"not measured: no run stands in for {' or '.join(missing)}"
    if base is cand:
        return "not measured: one run stands for both points (nothing here differs as they do)"
    points = reference.points[claim.baseline], reference.points[claim.candidate]
    changed = [s for s in _POINT_SETTINGS if points[0].get(s) != points[1].get(s)]
    if _one_stack_for_two(reference, claim, base, cand):
        return _ONE_STACK.format(stack=_stack_of(base))
    direction = "judged by direction only"
    if changed == ["stack"]:
        return (
            f"a stand-in, {direction}: the same engine and model on a stand-in for the older "
            f"stack and one for the newer here ({_stack_of(base)} against {_stack_of(cand)}); "
            "it tells whether what differs between these changes the baseline's speed here, "
            f"nothing about the published stacks themselves ({points[0].stack} against "
            f"{points[1].stack}) or how large the change is on the reference hardware"
        )
    both = f" of a claim that changes {', '.join(changed)} at once" if len(changed) > 1 else ""
    return (
        f"a stand-in{both}, {direction} (is the same kind of change faster or "
        "slower here); how large it is on the reference hardware cannot be told here"
    )


def _judge(
    check: ClaimCheck,
    c: Comparison,
    published: tuple[float, float],
    family: int,
    confidence: float,
    same_hardware: bool,
) -> None:
    """A measured claim's agreement with the published ratio (both noises, Bonferroni over
    the ``family``) and its status; one launch per arm holds the status for those launches."""
    se_published, df_published = published
    se = math.sqrt(c.se**2 + se_published**2)
    df = se**4 / (c.se**4 / c.df + se_published**4 / df_published)
    half = float(scipy_stats.t.ppf(1 - round(1 - confidence, 12) / (2 * family), df)) * se
    gap = c.log_diff - math.log(check.published_ratio)
    agreement = math.exp(gap - half), math.exp(gap + half)
    check.agreement_low, check.agreement_high = agreement
    finding = c.within_launch if c.launches_only else c.finding
    status = _claim_status(check.published_ratio, agreement, finding, same_hardware)
    if c.launches_only:
        check.within_launch, check.status = status, ClaimStatus.inconclusive
    else:
        check.status = status


def _claim_status(
    published_ratio: float,
    agreement: tuple[float, float],
    finding: Optional[Verdict],
    same_hardware: bool,
) -> ClaimStatus:
    """On the reference's hardware, contradicted by a ratio that disagrees beyond the noise
    (``agreement``: measured / published); on other hardware, by a verdict the other way;
    reproduced by one the published way."""
    published_way = Verdict.faster if published_ratio > 1 else Verdict.slower
    other_way = Verdict.slower if published_ratio > 1 else Verdict.faster
    if same_hardware and (agreement[0] > 1 or agreement[1] < 1):
        return ClaimStatus.contradicted
    if not same_hardware and finding == other_way:
        return ClaimStatus.contradicted
    if finding == published_way:
        return ClaimStatus.reproduced
    return ClaimStatus.inconclusive


def published_noise(reference: Any) -> tuple[float, float]:
    """(standard error, degrees of freedom) of a published log ratio: each published figure
    is a mean of ``method.measured_runs`` runs whose CV is unknown but at most
    ``method.published_cv_max``."""
    runs = int(reference.method.measured_runs)
    cv = float(reference.method.published_cv_max)
    return cv * math.sqrt(2 / runs), 2.0 * (runs - 1)


# A run, an arm or a config that stands in for published points.
StandIn = TypeVar("StandIn")


def stand_ins(
    points: Iterable[str], stand_for: Sequence[tuple[StandIn, Optional[str]]]
) -> dict[str, Optional[StandIn]]:
    """Each published point's stand-in, of (stand-in, its reference_point tag: points
    comma-separated): one that stands for the point alone (an older stack's baseline) before
    one that stands for it among others (one baseline for both stacks); else the last."""
    tagged = [(stand_in, (tag or "").split(",")) for stand_in, tag in stand_for]
    found: dict[str, Optional[StandIn]] = {}
    for point in points:
        matching = [(stand_in, its) for stand_in, its in tagged if point in its]
        found[point] = (
            min(reversed(matching), key=lambda match: len(match[1]))[0] if matching else None
        )
    return found


def reproduce(
    reference: Any,
    arms: Sequence[Arm],
    *,
    confidence: float,
    threshold: float,
    power: float,
    calibration: Optional[dict[tuple[str, ...], Calibration]] = None,
    same_hardware: bool,
) -> tuple[dict[str, Optional[Arm]], list[ClaimCheck]]:
    """Map runs to published points (by their reference_point tag) and judge the claims as
    one family. On the reference's hardware: contradicted when measured and published ratios
    differ beyond both their noises (the published figures' own included; Bonferroni over
    the claims measured); else reproduced when the measured interval excludes 1 on the
    published side (the verdict says faster or slower, as the claim does); else inconclusive;
    or not measured. On other hardware the runs are stand-ins, and only a claim's direction
    is judged: reproduced when the verdict goes the published way, contradicted when it goes
    the other, else inconclusive - the published size is not compared (each claim's text
    says so, and what its stand-ins can tell: for a claim between stacks alone, whether the
    newer stack changes the speed here, nothing of the published stacks themselves)."""
    by_point = stand_ins(
        reference.points, [(a, a.run.tags.get(Tag.reference_point, "")) for a in arms]
    )
    checks, comparisons = [], []
    for claim in reference.claims:
        ratio = (
            reference.points[claim.candidate].tok_per_s / reference.points[claim.baseline].tok_per_s
        )
        base, cand = by_point.get(claim.baseline), by_point.get(claim.candidate)
        comparison = None
        one_stack = (
            base is not None
            and cand is not None
            and _one_stack_for_two(reference, claim, base, cand)
        )
        if not same_hardware:
            text = f"{claim.text}; on this hardware: " + _stand_in_scope(reference, claim, by_point)
        elif one_stack and base is not None:
            text = f"{claim.text}; " + _ONE_STACK.format(stack=_stack_of(base))
        else:
            text = claim.text
        if base and cand and base is not cand and not one_stack:
            comparison = compare(
                base.values,
                cand.values,
                confidence=confidence,
                threshold=threshold,
                power=power,
                baseline_name=claim.baseline,
                candidate_name=claim.candidate,
            )
            comparisons.append(comparison)
        checks.append(ClaimCheck(claim.id, text, ratio, comparison, ClaimStatus.not_measured))
    measured = [(by_point[c.baseline], by_point[c.candidate]) for c in comparisons]
    runs = [(b.run, a.run) for b, a in measured if a and b]
    account_for_launches(runs, comparisons, calibration or {})
    time_drift(runs, comparisons)
    decide(comparisons)
    se_published, df_published = published_noise(reference)
    family = sum(c.testable for c in comparisons)
    for check in checks:
        if check.comparison is not None and check.comparison.testable:
            published = (se_published, df_published)
            _judge(check, check.comparison, published, family, confidence, same_hardware)
    return by_point, checks

"""Where speculation stops paying: the crossover concurrency, its interval, and the
switch-off setting for each engine's dynamic speculation.

For a speculative arm and its baseline measured at several concurrency levels, the effect
of speculation - the log of the throughput ratio, or for goodput under an SLO the
difference of the means (goodput reaches 0 under overload, where a ratio is undefined) -
is interpolated linearly in log2(concurrency); the crossover is where it first falls from
above 0 to 0 or below. Its interval comes from draws of every arm's mean (of log
throughput, or of goodput) at every level from its Student-t distribution (mean, standard
error, n - 1 degrees of freedom - what a percentile bootstrap of 3-5 values
underestimates); a draw that never crosses counts as beyond the highest level, one that
does not pay at the lowest as at or below it, so the interval is taken over all draws.
Over noise 2-5%, 3-5 runs per level and crossovers mid-range and near the edge it covers
the true crossover at least 95% of the time (tests/statistics/test_crossover.py). The
interval's high end is "beyond the highest level" - no crossover in range - unless some
level's gain is shown at or below 0 (one-sided, Bonferroni over the levels,
:func:`stops_in_range`): a flat x1.02 gain dips below 1 at one of seven levels by noise,
and "stops paying at c" is said only where the interval ends in range.

Launch-to-launch variance enters as each value carries it: with several launches per level
each value is a launch's mean; with one launch per arm the calibration of the server
family, where it applies, adds each arm's launch offset to the draws; otherwise the interval
is of these launches only, which the statement says, and no engine setting is recommended
(with a 2% launch offset per arm such intervals covered the truth 31-57% of the time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import pairwise
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from specexp.analysis.arms import Arm, Selector
from specexp.analysis.calibration import (
    CALIBRATION_CHECK_ALPHA,
    Calibration,
    account_for_launches,
    family_key,
    why_not_applicable,
)
from specexp.analysis.results import JobRun, Metric, Unit
from specexp.analysis.timeline import same_server
from specexp.core.records import History, Record, Version
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.stats.comparison import Comparison, compare, decide
from specexp.core.stats.summaries import UNSTEADY, notes_for
from specexp.core.stats.verdicts import Verdict
from specexp.engines import schedule_settings
from specexp.engines.records import BatchSchedule, ScheduleSetting

DRAWS = 4000

# Why a crossover of single launches is no claim about the configurations, and what to run.
LAUNCHES_ONLY = (
    "one launch per arm and level, so the interval leaves launch-to-launch variance out and "
    "holds for these launches only; for a crossover and a switch-off setting that hold, re-run "
    "the sweep with stats.launches=3 (launches interleaved at every level), or after "
    "calibrating the server family (a run with stats.launches=3 or more)"
)


class Scale(StrEnum):
    """How the arms' values are set against each other at a level."""

    ratio = "ratio"  # candidate / baseline (throughput: always positive)
    difference = "difference"  # candidate - baseline (goodput: 0 when nothing meets the SLO)

    @property
    def no_effect(self) -> float:
        return 1.0 if self == Scale.ratio else 0.0


@dataclass(frozen=True)
class Recommendation:
    """The switch-off a crossover recommends: from ``threshold`` concurrent requests on (None:
    none, ``note`` says why), what it was read off, and each engine's own setting for it."""

    threshold: Optional[int] = None
    note: str = ""
    basis: str = ""
    settings: dict[str, ScheduleSetting] = field(default_factory=dict)


def _recommendation_typed(record: dict[str, Any]) -> dict[str, Any]:
    """A format 2 crossover with its recommendation's engine settings under ``settings``,
    the files each names (SGLang's adaptive.json) under ``files``."""
    plain, setting = ("threshold", "note", "basis"), ("note", "speculative_config", "flags")
    advice = record.get("recommendation", {})
    typed = {k: v for k, v in advice.items() if k in plain}
    typed["settings"] = {
        engine: {
            **{k: v for k, v in switch.items() if k in setting},
            "files": {k: v for k, v in switch.items() if k not in setting},
        }
        for engine, switch in advice.items()
        if engine not in plain
    }
    return {**record, "recommendation": typed}


def _effect_named(record: dict[str, Any]) -> dict[str, Any]:
    """A format 1 crossover (a ratio only) with its ratio named the effect."""
    renamed = {"ratio": "effect", "lowest_ratio_ci": "lowest_effect_ci"}
    return {renamed.get(k, k): v for k, v in record.items()}


@dataclass
class Crossover(Record):
    HISTORY = History(
        "crossover",
        (
            Version(
                1,
                "the crossover of the throughput ratio; launches_only came later within format 1",
                ("launches_only",),
            ),
            Version(
                2,
                "any metric on a ratio or difference scale (goodput): ratio renamed effect, "
                "lowest_ratio_ci lowest_effect_ci, with metric, scale and collapsed; "
                "launch_variance_from came later within format 2",
                ("metric", "scale", "collapsed", "launch_variance_from"),
                upgrade=_effect_named,
            ),
            Version(
                3,
                "the recommendation typed: threshold, note, basis, and each engine's setting "
                "under settings (beside them before), the files it names under files; each "
                "setting's launches and source came later within format 3",
                upgrade=_recommendation_typed,
            ),
        ),
    )

    candidate: str
    baseline: str
    levels: list[int]
    # The candidate against the baseline at each level, on ``scale``, of ``metric``.
    effect: list[float]
    estimate: Optional[float]  # concurrency where speculation stops paying; None if not in range
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None  # None with ci_low set: beyond the highest level measured
    no_crossing_share: float = 0.0  # draws without a crossover in range
    # The effect's interval at the lowest level (from the same draws); None without one.
    lowest_effect_ci: Optional[tuple[float, float]] = None
    # Levels whose values cannot carry a crossover claim, with the reasons.
    unreliable: dict[int, list[str]] = field(default_factory=dict)
    statement: str = ""
    recommendation: Recommendation = field(default_factory=Recommendation)
    # Each level measured on one launch per arm, on servers of their own: the interval is of
    # those launches (their runs), without the launch-to-launch variance.
    launches_only: bool = False
    metric: str = Metric.tok_per_s
    scale: Scale = Scale.ratio
    # Levels where both arms had 0 in every run (goodput: nothing met the SLO). A crossing
    # into one is censored: it lies anywhere after the level before.
    collapsed: list[int] = field(default_factory=list)
    # Single launches whose launch-to-launch variance the interval carries: whose.
    launch_variance_from: str = ""

    @property
    def reliable(self) -> bool:
        return not self.unreliable

    @property
    def never_pays(self) -> bool:
        """Worse even at the lowest level, with the interval to say so."""
        return self.lowest_effect_ci is not None and self.lowest_effect_ci[1] < self.scale.no_effect

    def describe_effect(self, value: float) -> str:
        """One level's effect in words: x1.234, or +12.3 (the metric's units)."""
        return f"x{value:.3f}" if self.scale == Scale.ratio else f"{value:+.1f}"


def _crossings(levels: Sequence[int], gain: np.ndarray) -> np.ndarray:
    """Crossover of each row of gains (draws x levels; log ratios or differences, 0 where
    speculation neither pays nor costs): where the interpolated gain first falls to 0 or
    below; the lowest level when it does not pay there; inf when it pays at every level."""
    x = np.log2(levels)
    found = np.where(gain[:, 0] <= 0, float(levels[0]), np.inf)
    done = gain[:, 0] <= 0
    for i in range(len(levels) - 1):
        hit = ~done & (gain[:, i] > 0) & (gain[:, i + 1] <= 0)
        frac = gain[hit, i] / (gain[hit, i] - gain[hit, i + 1])
        found[hit] = 2 ** (x[i] + frac * (x[i + 1] - x[i]))
        done |= hit
    return found


def stops_in_range(draws: np.ndarray, tail: float) -> bool:
    """Whether the draws (draws x levels of the gain) reject "no crossover in range" at
    ``tail``, one-sided: some level's gain is above 0 in fewer than tail / levels of the
    draws (Bonferroni over the levels). The first crossing of the draws alone does not:
    a flat small gain dips below 0 at one of many levels by noise, and so would place a
    crossover in most draws (a flat x1.02 over 7 levels and 3 launches each: "no crossover"
    outside the interval in 9-12% of sweeps)."""
    return bool((draws > 0).mean(axis=0).min() < tail / draws.shape[1])


def _mean_draws(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draws of the mean of ``values`` from its Student-t distribution (a constant when the
    values do not vary: goodput that is 0 in every run)."""
    spread = values.std(ddof=1) / math.sqrt(values.size)
    return values.mean() + spread * rng.standard_t(values.size - 1, DRAWS)


def _transform(values: np.ndarray, scale: Scale) -> np.ndarray:
    """Values on the scale whose means are differenced: logs for a ratio."""
    return np.log(values) if scale == Scale.ratio else values


def _can_draw(values: np.ndarray, scale: Scale) -> bool:
    # A ratio needs every level's spread: a log-scale mean without one has no interval.
    # Goodput of 0 in every run (nothing met the SLO) is a known value, not a missing one.
    return values.size >= 2 and (scale == Scale.difference or np.ptp(values) > 0)


@dataclass(frozen=True)
class LaunchOffset:
    """How much one arm's single-launch means move from launch to launch (variance of log
    throughput beyond the runs', as calibration runs measured it, Calibration.between_var,
    with its degrees of freedom); ``shared``: the arm's levels ran on one server, so one
    offset moves all of them."""

    var: float
    df: float
    shared: bool


def find_crossover(
    candidate: str,
    baseline: str,
    levels: Sequence[int],
    cand_values: Sequence[Sequence[float]],
    base_values: Sequence[Sequence[float]],
    confidence: float = 0.95,
    seed: int = 0,
    unreliable: Optional[Mapping[int, Sequence[str]]] = None,
    launches_only: bool = False,
    metric: str = Metric.tok_per_s,
    scale: Scale = Scale.ratio,
    offsets: Optional[tuple[LaunchOffset, LaunchOffset]] = None,
    launch_variance_from: str = "",
) -> Crossover:
    """Values per level for both arms (of ``metric`` for each measured run: aggregate tok/s
    on the ratio scale, goodput on the difference scale); ``unreliable``: the levels whose
    values cannot carry a claim, with the reasons (their warnings); ``offsets``: the
    candidate's and the baseline's launch offsets, drawn into the interval (single launches
    whose launch variance calibration runs measured, named by ``launch_variance_from``)."""
    order = np.argsort(levels)
    levels = [int(levels[i]) for i in order]
    cand = [_transform(np.asarray(cand_values[i], float), scale) for i in order]
    base = [_transform(np.asarray(base_values[i], float), scale) for i in order]
    gain = [float(c.mean() - b.mean()) for c, b in zip(cand, base, strict=True)]
    collapsed = [
        level
        for level, c, b in zip(levels, cand, base, strict=True)
        if scale == Scale.difference and not c.any() and not b.any()
    ]
    estimate = float(_crossings(levels, np.array([gain]))[0])
    from_gain = np.exp if scale == Scale.ratio else np.asarray
    result = Crossover(
        candidate,
        baseline,
        levels,
        [float(v) for v in from_gain(gain)],
        None if math.isinf(estimate) else estimate,
        unreliable={
            level: list(reasons)
            for level, reasons in sorted((unreliable or {}).items())
            if reasons and level in levels
        },
        launches_only=launches_only,
        metric=metric,
        scale=scale,
        collapsed=collapsed,
        launch_variance_from=launch_variance_from,
    )
    tail = (1 - confidence) / 2
    if all(_can_draw(v, scale) for v in cand + base):
        rng = np.random.default_rng(seed)
        draws = np.column_stack(
            [_mean_draws(c, rng) - _mean_draws(b, rng) for c, b in zip(cand, base, strict=True)]
        )
        # Launch offsets: the candidate's adds, the baseline's subtracts; one per draw for
        # an arm whose levels shared a server, else one per level.
        for offset, sign in zip(offsets, (1.0, -1.0), strict=True) if offsets else ():
            width = 1 if offset.shared else len(levels)
            draws += sign * math.sqrt(offset.var) * rng.standard_t(offset.df, (DRAWS, width))
        found = _crossings(levels, draws)
        # Censored crossings: the interval's low end takes each at the level before.
        earliest = found.copy()
        for before, level in zip(levels[:-1], levels[1:], strict=True):
            if level in collapsed:
                earliest[found == level] = before
        low = np.quantile(earliest, tail, method="inverted_cdf")
        high = np.quantile(found, 1 - tail, method="inverted_cdf")
        result.ci_low = float(low)
        result.ci_high = (
            float(high) if not math.isinf(high) and stops_in_range(draws, tail) else None
        )
        result.no_crossing_share = float(np.mean(np.isinf(found)))
        effect_low, effect_high = from_gain(np.quantile(draws[:, 0], [tail, 1 - tail]))
        result.lowest_effect_ci = (float(effect_low), float(effect_high))
    result.statement = _statement(result, confidence)
    return result


def _statement(result: Crossover, confidence: float) -> str:
    """The finding in words: where the candidate stops paying, with its interval; that it
    never pays only when the lowest level's interval says so; and first, when levels were
    noisy, that no crossover claim can be made on them."""
    levels, candidate, baseline = result.levels, result.candidate, result.baseline
    span = f"concurrency {levels[0]}..{levels[-1]}"
    percent = f"{confidence * 100:g}%"
    lowest = result.lowest_effect_ci
    first = result.describe_effect(result.effect[0])
    lowest_text = (
        f"{first}, {percent} CI {result.describe_effect(lowest[0])}.."
        f"{result.describe_effect(lowest[1])}"
        if lowest
        else f"{first}, no interval"
    )
    better = (
        "faster than" if result.metric == Metric.tok_per_s else f"has more {result.metric} than"
    )
    if result.estimate is None:
        finding = (
            f"no crossover in {span}: {candidate} {better} {baseline} at every level "
            f"measured ({result.no_crossing_share:.0%} of draws agree)"
        )
    elif result.estimate == levels[0] and result.effect[0] <= result.scale.no_effect:
        finding = (
            f"{candidate} does not pay even at concurrency {levels[0]}, the lowest level "
            f"measured ({lowest_text})"
            if result.never_pays and not result.launches_only
            else f"{candidate}'s launch was behind {baseline}'s at concurrency {levels[0]}, the "
            f"lowest level measured ({lowest_text}, of these launches' runs)"
            if result.never_pays
            else f"{candidate} is not shown to pay at concurrency {levels[0]}, the lowest level "
            f"measured, nor to cost ({lowest_text}: the interval holds "
            f"{result.describe_effect(result.scale.no_effect)})"
        )
    elif result.ci_low is not None and result.ci_high is None:
        lowest_at = int(np.argmin(result.effect))
        finding = (
            f"{candidate} is not shown to stop paying in {span}: its effect is lowest at "
            f"concurrency {levels[lowest_at]} ({result.describe_effect(result.effect[lowest_at])}"
            f", a crossing at {result.estimate:.1f} as measured), but the {percent} CI "
            f"{result.ci_low:.1f}..beyond {levels[-1]} holds no crossover in range "
            f"({result.no_crossing_share:.0%} of draws saw none)"
        )
    else:
        if result.ci_low is None:
            interval = "no interval: a level has fewer than 2 values or no spread"
        else:
            interval = f"{percent} CI {result.ci_low:.1f}..{result.ci_high:.1f}"
        where = f"at concurrency {result.estimate:.1f}"
        if result.estimate in result.collapsed:
            before = levels[levels.index(int(result.estimate)) - 1]
            where = (
                f"between concurrency {before} and {result.estimate:.0f} (at "
                f"{result.estimate:.0f} neither arm had a run with any {result.metric})"
            )
        finding = (
            f"{candidate} stops paying {where} ({interval}; "
            f"{result.no_crossing_share:.0%} of draws saw no crossover in {span})"
        )
    if result.launches_only:
        finding = f"{LAUNCHES_ONLY}; as these launches measured it: {finding}"
    elif result.launch_variance_from:
        finding = f"{finding}; the interval carries the launch-to-launch variance of " + (
            result.launch_variance_from
        )
    if result.metric != Metric.tok_per_s:
        finding = f"on {result.metric}: {finding}"
    if result.reliable:
        return finding
    noisy = "; ".join(
        f"{level} ({', '.join(reasons)})" for level, reasons in result.unreliable.items()
    )
    return f"UNRELIABLE: no crossover claim on noisy levels - {noisy}. As measured: {finding}"


def recommend(
    crossover: Crossover, speculative: SpeculativeConfig, max_batch: int = 1024
) -> Recommendation:
    """The switch-off threshold as each engine's own dynamic-speculation setting, where the
    interval carries launch-to-launch variance and places the crossover in range; none on
    one launch per arm and level, on noisy levels, where the lowest level's interval shows
    neither a gain nor a loss, or where the interval reaches beyond the highest level."""
    if crossover.launches_only:
        return Recommendation(note=f"no switch-off recommended: {LAUNCHES_ONLY}")
    if not crossover.reliable:
        return Recommendation(
            note="no switch-off recommended: the crossover is unreliable on levels "
            + ", ".join(map(str, crossover.unreliable))
            + " (re-measure them)"
        )
    if crossover.estimate is None:
        return Recommendation(
            note="speculation paid at every level measured: keep it on in this range"
        )
    lowest = crossover.lowest_effect_ci
    if lowest is not None and lowest[0] <= 1 and not crossover.never_pays:
        # Not shown to pay where it should pay most: a threshold would be read off noise.
        return Recommendation(
            note=f"no switch-off recommended: at concurrency {crossover.levels[0]} speculation "
            f"is shown neither to pay nor to cost (ratio CI {lowest[0]:.3f}..{lowest[1]:.3f})"
        )
    if crossover.ci_high is None and not crossover.never_pays:
        # A flat small gain crosses 0 somewhere by noise alone; a switch-off needs the
        # interval to place the crossing inside the levels measured.
        return Recommendation(
            note="no switch-off recommended: the crossover's interval reaches beyond "
            f"concurrency {crossover.levels[-1]}, the highest level measured, so speculation "
            "is not shown to stop paying in range (measure higher levels, or more launches)"
        )
    # The interval's lower end: speculation is switched off wherever it may not pay.
    conservative = crossover.ci_low if crossover.ci_low is not None else crossover.estimate
    threshold = max(1, math.ceil(conservative))
    return Recommendation(
        threshold=threshold,
        basis=(
            f"the lower end of the crossover's interval ({crossover.ci_low:.1f}; estimate "
            f"{crossover.estimate:.1f}), so that speculation is off wherever it may not pay"
            if crossover.ci_low is not None
            else f"the estimate ({crossover.estimate:.1f}); it has no interval"
        ),
        settings=schedule_settings(
            BatchSchedule.switch_off(threshold, speculative.num_draft_tokens, max_batch),
            speculative,
        ),
    )


def family(arm: Arm, factor: str) -> str:
    """The arm's other factors, which name the curve it lies on along ``factor``."""
    return " ".join(f"{k}={v}" for k, v in arm.others(factor)) or "all"


def level(arm: Arm, factor: str) -> int:
    return int(float(arm.factors[factor]))


def families(arms: Sequence[Arm], factor: str) -> dict[str, dict[int, Arm]]:
    """Arms that vary ``factor`` grouped by their other factors: {family: {level: arm}}."""
    grouped: dict[str, dict[int, Arm]] = {}
    for arm in arms:
        if factor in arm.factors:
            grouped.setdefault(family(arm, factor), {})[level(arm, factor)] = arm
    return grouped


def analyse(
    arms: Sequence[Arm],
    baseline: Selector,
    factor: str,
    confidence: float,
    cv_warn: Optional[float] = None,
    metric: str = Metric.tok_per_s,
    scale: Scale = Scale.ratio,
    calibration: Mapping[tuple[str, ...], Calibration] = MappingProxyType({}),
) -> list[Crossover]:
    """A crossover for each speculative family against the baseline family that shares its
    other settings, over the levels both were measured at, of the arms' values (``metric``
    on ``scale``); with ``cv_warn``, the levels where either arm's warnings fire
    (:func:`level_warnings`) are named unreliable. Single launches on servers of their own
    carry the launch variance of ``calibration`` where it applies to every level of both
    families (:func:`launch_offsets`), else their crossover holds for these launches only."""
    grouped = families(arms, factor)

    def others(levels: dict[int, Arm]) -> tuple:
        return next(iter(levels.values())).others(factor) if levels else ()

    def without_baseline_factor(levels: dict[int, Arm]) -> tuple:
        return tuple((k, v) for k, v in others(levels) if k != baseline.factor)

    bases = {
        without_baseline_factor(levels): name
        for name, levels in grouped.items()
        if dict(others(levels)).get(baseline.factor) == baseline.value
    }
    results = []
    for name, levels in grouped.items():
        base_name = bases.get(without_baseline_factor(levels))
        if base_name is None or base_name == name:
            continue
        common = sorted(set(levels) & set(grouped[base_name]))
        if len(common) < 2:
            continue
        single = all(
            levels[c].unit == grouped[base_name][c].unit == Unit.run
            and not same_server(levels[c].run, grouped[base_name][c].run)
            for c in common
        )
        calibrated = (
            launch_offsets(
                [levels[c].run for c in common],
                [grouped[base_name][c].run for c in common],
                calibration,
            )
            if single and scale == Scale.ratio
            else None
        )
        results.append(
            find_crossover(
                name,
                base_name,
                common,
                [levels[c].values for c in common],
                [grouped[base_name][c].values for c in common],
                confidence,
                launches_only=single and calibrated is None,
                unreliable=None
                if cv_warn is None
                else {
                    c: level_warnings(levels[c], name, cv_warn, spread=scale == Scale.ratio)
                    + level_warnings(
                        grouped[base_name][c], base_name, cv_warn, spread=scale == Scale.ratio
                    )
                    for c in common
                },
                metric=metric,
                scale=scale,
                offsets=calibrated[0] if calibrated else None,
                launch_variance_from=calibrated[1] if calibrated else "",
            )
        )
    return results


def launch_offsets(
    candidate: Sequence[JobRun],
    baseline: Sequence[JobRun],
    calibration: Mapping[tuple[str, ...], Calibration],
) -> Optional[tuple[tuple[LaunchOffset, LaunchOffset], str]]:
    """Each family's launch offset (its runs, one per level, single launches) from the
    calibration of its server family, with the calibration runs named; None unless a
    calibration applies to every level's run of both (:func:`why_not_applicable`)."""
    found = []
    for runs in (candidate, baseline):
        keys = {family_key(run) for run in runs}
        known = calibration.get(next(iter(keys))) if len(keys) == 1 else None
        if known is None or any(
            why_not_applicable(known, run, CALIBRATION_CHECK_ALPHA) for run in runs
        ):
            return None
        shared = all(same_server(a, b) for a, b in pairwise(runs))
        found.append((LaunchOffset(known.between_var, known.df, shared), known.runs))
    names = sorted({r[:8] for _, runs in found for r in runs})
    return (found[0][0], found[1][0]), f"calibration runs {', '.join(names)}"


def level_warnings(arm: Arm, name: str, cv_warn: float, spread: bool = True) -> list[str]:
    """Why one arm's values at a level cannot place a crossover (``name``: its curve): too
    much spread or a trend in them (with ``spread``: goodput near overload swings by whole
    requests, which its interval carries), runs that started on a busy server or ran on a
    busy machine."""
    reasons = (
        [f"{name} {note.kind}" for note in notes_for(arm.values, cv_warn) if note.kind in UNSTEADY]
        if spread
        else []
    )
    for metric, what in (
        (Metric.busy_start_runs, "started on a busy server"),
        (Metric.busy_machine_runs, "ran on a busy machine"),
    ):
        count = arm.run.metrics.get(metric, 0.0)
        if count:
            reasons.append(f"{name} {count:.0f} run(s) {what}")
    return reasons


@dataclass
class SwitchOffCheck(Record):
    """Dynamic speculation checked level by level: the arm that stops drafting from
    ``threshold`` requests per batch against the faster of the two fixed arms it should
    follow (speculation always on, or off), over the levels all three were measured at."""

    HISTORY = History(
        "switch-off check",
        (Version(1, "the adaptive arm against the faster fixed arm, level by level"),),
    )
    DERIVED = ("outcomes",)

    adaptive: str
    static: str
    baseline: str
    threshold: int
    levels: list[int]
    followed: list[str]  # the fixed arm with the higher mean at each level
    comparisons: list[Comparison]  # adaptive against that arm, simultaneous over the levels
    statement: str = ""

    @property
    def outcomes(self) -> list[str]:
        """Per level: tracks (equivalent or faster), behind (slower) or undecided; with one
        launch per arm and no launch variance known, inconclusive, as comparisons are."""
        named = {Verdict.equivalent: "tracks", Verdict.faster: "tracks", Verdict.slower: "behind"}
        return [
            ONE_LAUNCH_EACH if c.launches_only else named.get(c.finding, "undecided")
            for c in self.comparisons
        ]


ONE_LAUNCH_EACH = "inconclusive: one launch each"


def check_switch_off(
    adaptive: tuple[str, Mapping[int, Arm]],
    static: tuple[str, Mapping[int, Arm]],
    baseline: tuple[str, Mapping[int, Arm]],
    threshold: int,
    confidence: float,
    equivalence: float,
    calibration: Optional[Mapping[tuple[str, ...], Calibration]] = None,
) -> SwitchOffCheck:
    """Each family as (name, {level: arm}). At each level the adaptive arm is compared
    with the fixed arm of higher geometric mean, launches accounted for as in comparisons
    (:func:`account_for_launches`: single launches on servers of their own are tested
    against a calibration's launch variance, else say nothing across launches); the
    intervals hold together over the levels (Bonferroni), so "behind" at any level is a
    claim at the confidence asked."""
    levels = sorted(set(adaptive[1]) & set(static[1]) & set(baseline[1]))
    followed, comparisons, runs = [], [], []
    for level in levels:
        faster = max((static, baseline), key=lambda f: float(np.mean(np.log(f[1][level].values))))
        followed.append(faster[0])
        runs.append((faster[1][level].run, adaptive[1][level].run))
        comparisons.append(
            compare(
                faster[1][level].values,
                adaptive[1][level].values,
                confidence=confidence,
                threshold=equivalence,
                baseline_name=f"{faster[0]} at {level}",
                candidate_name=f"{adaptive[0]} at {level}",
            )
        )
    account_for_launches(runs, comparisons, dict(calibration or {}))
    decide(comparisons)
    check = SwitchOffCheck(
        adaptive[0], static[0], baseline[0], threshold, levels, followed, comparisons
    )
    by_outcome: dict[str, list[int]] = {}
    for level, outcome in zip(levels, check.outcomes, strict=True):
        by_outcome.setdefault(outcome, []).append(level)
    parts = [f"{outcome} at {', '.join(map(str, found))}" for outcome, found in by_outcome.items()]
    unjudged = (
        "; one launch per arm and no launch variance known: re-run with stats.launches=3 "
        "(or calibrate the server family) to judge it"
        if ONE_LAUNCH_EACH in by_outcome
        else ""
    )
    check.statement = (
        f"{adaptive[0]} (drafting below {threshold} requests per batch) against the faster of "
        f"{static[0]} and {baseline[0]} at each level: " + "; ".join(parts) + unjudged
    )
    return check

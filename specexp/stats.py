"""The statistics specexp trusts, small and explicit.

* A configuration: mean, std, CV and a Student-t interval; warnings when the values cannot
  be trusted (high CV, a trend left in the measured runs, outliers).
* Two configurations: the speedup as a ratio of means with a confidence interval from
  Welch's t on log values (Kalibera & Jones report the ratio with a CI; logs make it
  symmetric), a Mann-Whitney U p-value as a second opinion, a BCa bootstrap interval when
  there are enough values, and a verdict with a practical threshold: faster / slower /
  equivalent (TOST within the threshold) / inconclusive. Holm's correction applies across
  the comparisons of a sweep.
* Planning: runs per arm needed for an effect, and the minimum detectable effect of the runs
  made, from the measured CV.

Values passed in must be independent: per launch when a configuration had several server
launches, per measured run otherwise (requests inside one run are not independent).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

import numpy as np
from scipy import optimize, special
from scipy import stats as scipy_stats

FASTER, SLOWER, EQUIVALENT, INCONCLUSIVE = "faster", "slower", "equivalent", "inconclusive"
# Below this many values per arm the bootstrap interval is not computed (it is unreliable).
BOOTSTRAP_MIN_N = 8


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    std: float
    cv: float
    ci_low: float
    ci_high: float
    median: float
    minimum: float
    maximum: float
    confidence: float

    def as_dict(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_{k}": float(v) for k, v in asdict(self).items() if k != "confidence"}


def _clean(values: Sequence[float]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def summarize(values: Sequence[float], confidence: float = 0.95) -> Optional[Summary]:
    """Student-t interval of the mean; None without data; NaN bounds for a single value."""
    data = _clean(values)
    if data.size == 0:
        return None
    mean = float(data.mean())
    std = float(data.std(ddof=1)) if data.size > 1 else 0.0
    if data.size > 1:
        half = float(
            scipy_stats.t.ppf(0.5 + confidence / 2, data.size - 1) * std / math.sqrt(data.size)
        )
        low, high = mean - half, mean + half
    else:
        low = high = float("nan")
    return Summary(
        n=int(data.size),
        mean=mean,
        std=std,
        cv=std / mean if mean else float("nan"),
        ci_low=low,
        ci_high=high,
        median=float(np.median(data)),
        minimum=float(data.min()),
        maximum=float(data.max()),
        confidence=confidence,
    )


def percentiles(values: Sequence[float], qs: Sequence[int] = (50, 90, 99)) -> dict[str, float]:
    data = _clean(values)
    if data.size == 0:
        return {}
    return {f"p{q}": float(np.percentile(data, q)) for q in qs}


@dataclass(frozen=True)
class VarianceComponents:
    """Variance of a two-level design (launches x runs), as one-way random-effects ANOVA."""

    launches: int
    runs_per_launch: float
    within_launch: float  # run-to-run variance inside one server launch
    between_launch: float  # extra variance from relaunching the server (>= 0)


def variance_components(
    values_by_launch: Sequence[Sequence[float]],
) -> Optional[VarianceComponents]:
    groups = [_clean(g) for g in values_by_launch if len(_clean(g))]
    if len(groups) < 2 or any(g.size < 2 for g in groups):
        return None
    k = len(groups)
    n_bar = float(np.mean([g.size for g in groups]))
    within = float(np.mean([g.var(ddof=1) for g in groups]))
    means_var = float(np.var([g.mean() for g in groups], ddof=1))
    return VarianceComponents(
        launches=k,
        runs_per_launch=n_bar,
        within_launch=within,
        between_launch=max(0.0, means_var - within / n_bar),
    )


def warnings_for(values: Sequence[float], cv_warn: float, alpha: float = 0.05) -> list[str]:
    """Reasons not to trust a set of measured values, in words a person can act on."""
    data = _clean(values)
    notes = []
    if data.size >= 2:
        cv = float(data.std(ddof=1) / data.mean()) if data.mean() else float("nan")
        if cv > cv_warn:
            notes.append(
                f"CV {cv:.1%} is above {cv_warn:.0%}: small differences cannot be resolved"
            )
    if data.size >= 5:
        tau, p = scipy_stats.kendalltau(np.arange(data.size), data)
        if p < alpha:
            direction = "rising" if tau > 0 else "falling"
            notes.append(
                f"values keep {direction} across the measured runs (Kendall tau {tau:.2f}, p={p:.3f}): "
                "warm-up may not be over; add stats.warmup_runs"
            )
    if data.size >= 4:
        median = np.median(data)
        mad = np.median(np.abs(data - median))
        if mad > 0:
            robust_z = 0.6745 * (data - median) / mad  # Iglewicz & Hoaglin's modified z-score
            outliers = [f"run {i} ({data[i]:.4g})" for i in np.flatnonzero(np.abs(robust_z) > 3.5)]
            if outliers:
                notes.append(f"outliers: {', '.join(outliers)}")
    if data.size < 5:
        notes.append(f"only {data.size} values: intervals are wide and rank tests weak")
    return notes


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1)."""
    m = len(p_values)
    order = np.argsort(p_values)
    adjusted = np.empty(m)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted.tolist()


def _welch_log(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(difference of mean logs b - a, its standard error, Welch-Satterthwaite df)."""
    la, lb = np.log(a), np.log(b)
    va, vb = la.var(ddof=1) / a.size, lb.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    df = (
        (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
        if se > 0
        else float(a.size + b.size - 2)
    )
    return float(lb.mean() - la.mean()), se, df


def runs_needed(
    cv: float, effect: float, alpha: float = 0.05, power: float = 0.8, limit: int = 10000
) -> Optional[int]:
    """Runs per arm for a two-sided t test on logs to find a relative ``effect`` with ``power``."""
    if not (cv > 0 and effect > 0):
        return None
    delta = math.log1p(effect)
    # Start just below the normal approximation, then step up with the exact t power.
    z = scipy_stats.norm.ppf(1 - alpha / 2) + scipy_stats.norm.ppf(power)
    n = max(2, int(2 * (z * cv / delta) ** 2) - 2)
    while n <= limit:
        if _power(delta, cv, n, alpha) >= power:
            return n
        n += 1
    return None


def _power(delta: float, cv: float, n: int, alpha: float) -> float:
    """Power of the two-sided two-sample t test (n per arm) for a log-difference ``delta``.

    The shifted central t approximates the noncentral t closely (the same runs-needed
    table as the exact form) and, unlike scipy's noncentral t, stays finite for large shifts.
    """
    df = 2 * n - 2
    shift = delta / (cv * math.sqrt(2 / n))
    crit = special.stdtrit(df, 1 - alpha / 2)
    # stdtr is the t CDF; the scipy.special forms are fast enough for simulation loops.
    return float(special.stdtr(df, shift - crit) + special.stdtr(df, -crit - shift))


def minimum_detectable_effect(
    cv: float, n: int, alpha: float = 0.05, power: float = 0.8
) -> Optional[float]:
    """Smallest relative effect that ``n`` runs per arm find with ``power``, at this CV."""
    if not (cv > 0 and n >= 2):
        return None
    hi = 1.0
    while _power(math.log1p(hi), cv, n, alpha) < power:
        hi *= 2
        if hi > 1e6:
            return None
    return float(
        optimize.brentq(lambda e: _power(math.log1p(e), cv, n, alpha) - power, 0.0, hi, xtol=1e-5)
    )


@dataclass
class Comparison:
    """Candidate against baseline: ratio of means (candidate / baseline), CI, tests, verdict."""

    baseline: str
    candidate: str
    n_baseline: int
    n_candidate: int
    mean_baseline: float
    mean_candidate: float
    ratio: float
    ci_low: float
    ci_high: float
    p_welch: float
    p_mannwhitney: float
    p_equivalence: float
    confidence: float
    threshold: float
    bootstrap_ci: Optional[tuple[float, float]] = None
    p_welch_adjusted: Optional[float] = None
    p_equivalence_adjusted: Optional[float] = None
    verdict: str = INCONCLUSIVE
    mde: Optional[float] = None
    runs_needed: Optional[int] = None
    notes: list[str] = field(default_factory=list)

    @property
    def change(self) -> float:
        return self.ratio - 1.0

    def to_json(self) -> dict:
        return {**asdict(self), "change": self.change}


def compare(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = 0.95,
    threshold: float = 0.01,
    power: float = 0.8,
    baseline_name: str = "baseline",
    candidate_name: str = "candidate",
    seed: int = 0,
) -> Comparison:
    """Compare two independent samples of a higher-is-better metric (e.g. tok/s)."""
    a, b = _clean(baseline), _clean(candidate)
    if a.size < 2 or b.size < 2:
        raise ValueError(
            f"need at least 2 values per arm, got {a.size} ({baseline_name}) and {b.size} ({candidate_name})"
        )
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("values must be positive (ratios are taken on logs)")
    alpha = 1 - confidence
    diff, se, df = _welch_log(a, b)
    if se > 0:
        half = scipy_stats.t.ppf(1 - alpha / 2, df) * se
        p_welch = float(2 * scipy_stats.t.sf(abs(diff) / se, df))
        bound = math.log1p(threshold)
        p_equivalence = float(
            max(
                scipy_stats.t.sf((diff + bound) / se, df),
                scipy_stats.t.cdf((diff - bound) / se, df),
            )
        )
    else:  # identical values in both arms: no spread to test against
        half, p_welch = 0.0, (1.0 if diff == 0 else 0.0)
        p_equivalence = 0.0 if abs(diff) < math.log1p(threshold) else 1.0
    ratio = float(b.mean() / a.mean())
    # The Welch interval is for the ratio of geometric means; shift it onto the ratio of means.
    shift = math.log(ratio) - diff
    result = Comparison(
        baseline=baseline_name,
        candidate=candidate_name,
        n_baseline=int(a.size),
        n_candidate=int(b.size),
        mean_baseline=float(a.mean()),
        mean_candidate=float(b.mean()),
        ratio=ratio,
        ci_low=math.exp(diff + shift - half),
        ci_high=math.exp(diff + shift + half),
        p_welch=p_welch,
        p_mannwhitney=float(scipy_stats.mannwhitneyu(b, a, alternative="two-sided").pvalue),
        p_equivalence=p_equivalence,
        confidence=confidence,
        threshold=threshold,
    )
    if min(a.size, b.size) >= BOOTSTRAP_MIN_N:
        boot = scipy_stats.bootstrap(
            (a, b),
            lambda x, y, axis=-1: y.mean(axis=axis) / x.mean(axis=axis),
            confidence_level=confidence,
            method="BCa",
            n_resamples=2000,
            random_state=np.random.default_rng(seed),
            vectorized=True,
        )
        result.bootstrap_ci = (
            float(boot.confidence_interval.low),
            float(boot.confidence_interval.high),
        )
    pooled_cv = float(math.sqrt((np.log(a).var(ddof=1) + np.log(b).var(ddof=1)) / 2))
    result.mde = minimum_detectable_effect(pooled_cv, int(min(a.size, b.size)), alpha, power)
    result.runs_needed = runs_needed(pooled_cv, threshold, alpha, power)
    decide([result])
    return result


def decide(comparisons: Sequence[Comparison]) -> None:
    """Set each verdict, with Holm's correction over the family when there are several."""
    if not comparisons:
        return
    p_diff = holm([c.p_welch for c in comparisons])
    p_equiv = holm([c.p_equivalence for c in comparisons])
    for c, pd, pe in zip(comparisons, p_diff, p_equiv, strict=True):
        alpha = 1 - c.confidence
        c.p_welch_adjusted, c.p_equivalence_adjusted = pd, pe
        c.notes = [
            n
            for n in c.notes
            if not n.startswith(("difference below", "rank test disagrees", "cannot detect"))
        ]
        if pe < alpha:
            c.verdict = EQUIVALENT
        elif pd < alpha:
            c.verdict = FASTER if c.ratio > 1 else SLOWER
            if abs(c.change) < c.threshold:
                c.notes.append(f"difference below the practical threshold ({c.threshold:.1%})")
            if c.p_mannwhitney >= alpha:
                c.notes.append(
                    f"rank test disagrees (Mann-Whitney p={c.p_mannwhitney:.3f}; with few runs it cannot reach {alpha})"
                )
        else:
            c.verdict = INCONCLUSIVE
            if c.mde is not None and c.mde > c.threshold:
                c.notes.append(
                    f"cannot detect effects below {c.mde:.1%} with these runs; "
                    f"{c.runs_needed or 'many'} runs per arm would find {c.threshold:.1%}"
                )

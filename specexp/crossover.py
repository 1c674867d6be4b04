"""Where speculation stops paying: the crossover concurrency, its bootstrap CI, and the
switch-off setting for each engine's dynamic speculation.

For a speculative arm and its baseline measured at several concurrency levels, the log of
the throughput ratio is interpolated linearly in log2(concurrency); the crossover is where
it first falls from above 0 to 0 or below. A bootstrap over the measured values of every
arm and level gives its confidence interval, and says how often no crossover was seen.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

import numpy as np

from specexp.analysis import Arm, Selector
from specexp.engines import engines
from specexp.schemas import SpeculativeConfig

BOOTSTRAP_RESAMPLES = 2000


@dataclass
class Crossover:
    candidate: str
    baseline: str
    levels: list[int]
    ratio: list[float]  # candidate / baseline throughput at each level
    estimate: Optional[float]  # concurrency where speculation stops paying; None if not in range
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    no_crossing_share: float = 0.0  # bootstrap resamples without a crossover in range
    statement: str = ""
    recommendation: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def _crossing(levels: Sequence[int], log_ratio: Sequence[float]) -> Optional[float]:
    x = np.log2(levels)
    if log_ratio[0] <= 0:
        return float(levels[0])  # does not pay even at the lowest level measured
    for i in range(len(levels) - 1):
        if log_ratio[i] > 0 >= log_ratio[i + 1]:
            frac = log_ratio[i] / (log_ratio[i] - log_ratio[i + 1])
            return float(2 ** (x[i] + frac * (x[i + 1] - x[i])))
    return None


def find_crossover(
    candidate: str,
    baseline: str,
    levels: Sequence[int],
    cand_values: Sequence[Sequence[float]],
    base_values: Sequence[Sequence[float]],
    confidence: float = 0.95,
    seed: int = 0,
) -> Crossover:
    """Values per level for both arms (aggregate tok/s of each measured run)."""
    order = np.argsort(levels)
    levels = [int(levels[i]) for i in order]
    cand = [np.asarray(cand_values[i], float) for i in order]
    base = [np.asarray(base_values[i], float) for i in order]
    log_ratio = [math.log(c.mean() / b.mean()) for c, b in zip(cand, base, strict=True)]
    estimate = _crossing(levels, log_ratio)
    rng = np.random.default_rng(seed)
    boots, none = [], 0
    for _ in range(BOOTSTRAP_RESAMPLES):
        lr = [
            math.log(rng.choice(c, c.size).mean() / rng.choice(b, b.size).mean())
            for c, b in zip(cand, base, strict=True)
        ]
        found = _crossing(levels, lr)
        if found is None:
            none += 1
        else:
            boots.append(found)
    result = Crossover(
        candidate,
        baseline,
        levels,
        [math.exp(v) for v in log_ratio],
        estimate,
        no_crossing_share=none / BOOTSTRAP_RESAMPLES,
    )
    if boots:
        tail = (1 - confidence) / 2 * 100
        result.ci_low, result.ci_high = (float(v) for v in np.percentile(boots, [tail, 100 - tail]))
    span = f"concurrency {levels[0]}..{levels[-1]}"
    if estimate is None:
        result.statement = (
            f"no crossover in {span}: {candidate} is faster than {baseline} at every level measured "
            f"({result.no_crossing_share:.0%} of bootstrap resamples agree)"
        )
    elif estimate == levels[0] and log_ratio[0] <= 0:
        result.statement = (
            f"{candidate} does not pay even at concurrency {levels[0]}, the lowest level measured"
        )
    else:
        result.statement = (
            f"{candidate} stops paying at concurrency {estimate:.1f} "
            f"({int(confidence * 100)}% CI {result.ci_low:.1f}..{result.ci_high:.1f}; "
            f"{result.no_crossing_share:.0%} of resamples saw no crossover in {span})"
        )
    return result


def recommend(crossover: Crossover, speculative: SpeculativeConfig, max_batch: int = 1024) -> dict:
    """The switch-off threshold as each engine's own dynamic-speculation setting."""
    if crossover.estimate is None:
        return {
            "threshold": None,
            "note": "speculation paid at every level measured: keep it on in this range",
        }
    threshold = max(1, math.ceil(crossover.estimate))
    return {
        "threshold": threshold,
        **{
            name: engine.switch_off(threshold, speculative, max_batch)
            for name, engine in engines().items()
        },
    }


def families(arms: Sequence[Arm], factor: str) -> dict[str, dict[int, Arm]]:
    """Arms that vary ``factor`` grouped by their other factors: {family: {level: arm}}."""
    grouped: dict[str, dict[int, Arm]] = {}
    for arm in arms:
        if factor in arm.factors:
            family = " ".join(f"{k}={v}" for k, v in arm.others(factor)) or "all"
            grouped.setdefault(family, {})[int(float(arm.factors[factor]))] = arm
    return grouped


def analyse(
    arms: Sequence[Arm], baseline: Selector, factor: str, confidence: float
) -> list[Crossover]:
    """A crossover for each speculative family against the baseline family that shares its
    other settings, over the levels both were measured at."""
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
        results.append(
            find_crossover(
                name,
                base_name,
                common,
                [levels[c].values for c in common],
                [grouped[base_name][c].values for c in common],
                confidence,
            )
        )
    return results

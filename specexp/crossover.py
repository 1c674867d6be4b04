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


def find_crossover(candidate: str, baseline: str, levels: Sequence[int], cand_values: Sequence[Sequence[float]],
                   base_values: Sequence[Sequence[float]], confidence: float = 0.95, seed: int = 0) -> Crossover:
    """Values per level for both arms (aggregate tok/s of each measured run)."""
    order = np.argsort(levels)
    levels = [int(levels[i]) for i in order]
    cand = [np.asarray(cand_values[i], float) for i in order]
    base = [np.asarray(base_values[i], float) for i in order]
    log_ratio = [math.log(c.mean() / b.mean()) for c, b in zip(cand, base)]
    estimate = _crossing(levels, log_ratio)
    rng = np.random.default_rng(seed)
    boots, none = [], 0
    for _ in range(BOOTSTRAP_RESAMPLES):
        lr = [math.log(rng.choice(c, c.size).mean() / rng.choice(b, b.size).mean()) for c, b in zip(cand, base)]
        found = _crossing(levels, lr)
        if found is None:
            none += 1
        else:
            boots.append(found)
    result = Crossover(candidate, baseline, levels, [math.exp(v) for v in log_ratio], estimate,
                       no_crossing_share=none / BOOTSTRAP_RESAMPLES)
    if boots:
        tail = (1 - confidence) / 2 * 100
        result.ci_low, result.ci_high = (float(v) for v in np.percentile(boots, [tail, 100 - tail]))
    span = f"concurrency {levels[0]}..{levels[-1]}"
    if estimate is None:
        result.statement = (f"no crossover in {span}: {candidate} is faster than {baseline} at every level measured "
                            f"({result.no_crossing_share:.0%} of bootstrap resamples agree)")
    elif estimate == levels[0] and log_ratio[0] <= 0:
        result.statement = f"{candidate} does not pay even at concurrency {levels[0]}, the lowest level measured"
    else:
        result.statement = (f"{candidate} stops paying at concurrency {estimate:.1f} "
                            f"({int(confidence * 100)}% CI {result.ci_low:.1f}..{result.ci_high:.1f}; "
                            f"{result.no_crossing_share:.0%} of resamples saw no crossover in {span})")
    return result


def recommend(crossover: Crossover, num_steps: int, num_draft_tokens: int, max_batch: int = 1024) -> dict:
    """The switch-off threshold as each engine's own dynamic-speculation setting."""
    if crossover.estimate is None:
        return {"threshold": None, "note": "speculation paid at every level measured: keep it on in this range"}
    threshold = max(1, math.ceil(crossover.estimate))
    sglang = {"1": {"candidate_steps": [num_steps]}, str(threshold): {"candidate_steps": [0]}}
    if threshold == 1:
        sglang = {"1": {"candidate_steps": [0]}}
    vllm_ranges = ([[1, threshold - 1, num_draft_tokens]] if threshold > 1 else []) + [[threshold, max_batch, 0]]
    return {
        "threshold": threshold,
        "sglang": {
            "flags": ["--speculative-adaptive", "--speculative-adaptive-config", "adaptive.json"],
            "adaptive.json": sglang,
            "note": "SGLang >= 0.5.11; batch-size keys map to candidate steps, [0] means no drafting",
        },
        "vllm": {"speculative_config": {"num_speculative_tokens_per_batch_size": vllm_ranges},
                 "note": "merge into --speculative-config; K=0 disables drafting for that batch-size range"},
        "llamacpp": {"note": "llama-server has no per-batch-size switch: serve without a draft above "
                             f"{threshold} concurrent streams"},
    }


def families(arms: Sequence, factor: str) -> dict[str, dict[int, object]]:
    """Arms grouped by their label without the factor: {family: {level: arm}}."""
    key = factor + "="
    grouped: dict[str, dict[int, object]] = {}
    for arm in arms:
        tokens = arm.label.split()
        level = [t for t in tokens if t.startswith(key)]
        if level:
            rest = " ".join(t for t in tokens if not t.startswith(key))
            grouped.setdefault(rest, {})[int(float(level[0][len(key):]))] = arm
    return grouped


def analyse(arms: Sequence, baseline_selector: str, factor: str, confidence: float) -> list[Crossover]:
    """A crossover for each speculative family against the baseline family that shares its
    other settings, over the levels both were measured at."""
    grouped = families(arms, factor)
    base_key = baseline_selector.split("=", 1)[0] + "="

    def others(name: str) -> list[str]:
        return sorted(t for t in name.split() if not t.startswith(base_key))

    bases = {" ".join(others(n)): n for n in grouped if baseline_selector in n.split()}
    results = []
    for name, levels in grouped.items():
        base_name = bases.get(" ".join(others(name)))
        if base_name is None or base_name == name:
            continue
        common = sorted(set(levels) & set(grouped[base_name]))
        if len(common) < 2:
            continue
        results.append(find_crossover(name, base_name, common, [levels[c].values for c in common],
                                      [grouped[base_name][c].values for c in common], confidence))
    return results

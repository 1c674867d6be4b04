"""What measuring until decided costs, against the fixed launches x runs plan.

    python benchmarks/sequential_cost.py [--sequences 1000] [--launch-s 60] [--run-s 10]

For each spread (between launches / within a launch), the cheapest fixed plan that finds
twice the threshold with power 0.8 when the spreads are known (specexp.core.stats
.planning.plan_repetitions, an oracle no real pilot gives), then whole sequences of the sweep's
sequential protocol (specexp.core.sequential.simulate, seeded) at no effect, twice and four
times the threshold: how often each verdict comes, and the mean launches per arm and
server-minutes (both arms) they spend, as a share of the fixed plan's.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter

import numpy as np

from specexp.core.sequential import Costs, SequentialDesign, simulate
from specexp.core.stats.planning import plan_repetitions

SPREADS = [(0.02, 0.02), (0.005, 0.03), (0.03, 0.005)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=1000)
    parser.add_argument("--launch-s", type=float, default=60.0)
    parser.add_argument("--run-s", type=float, default=10.0)
    parser.add_argument("--warmup-runs", type=int, default=2)
    parser.add_argument("--threshold", type=float, default=0.01)
    parser.add_argument("--max-launches", type=int, default=60)
    args = parser.parse_args()
    costs = Costs(args.launch_s, args.run_s, args.warmup_runs)
    design = SequentialDesign(
        alpha=0.05,
        threshold=args.threshold,
        design_effect=2 * args.threshold,
        power=0.8,
        max_launches=args.max_launches,
    )
    print(
        f"threshold {args.threshold:.0%}, design effect {2 * args.threshold:.0%}, alpha 0.05, "
        f"power 0.8; launch {args.launch_s:g} s, run {args.run_s:g} s, {args.warmup_runs} "
        f"warm-ups; {args.sequences} sequences per row; budget {args.max_launches} launches"
    )
    header = (
        f"{'between/within':>14} {'effect':>6} {'faster':>7} {'slower':>7} {'equiv':>6} "
        f"{'inconcl':>7} {'launches':>8} {'server-min':>10} {'of fixed':>8}"
    )
    for between, within in SPREADS:
        fixed = plan_repetitions(
            within_cv=within,
            between_cv=between,
            effect=2 * args.threshold,
            launch_s=args.launch_s,
            run_s=args.run_s,
            warmup_runs=args.warmup_runs,
        )
        assert fixed is not None
        fixed_min = 2 * fixed.cost_s / 60
        print(
            f"\n{between:.1%}/{within:.1%}: fixed plan {fixed.launches} launches x {fixed.runs} "
            f"runs per arm, {fixed_min:.0f} server-min, power {fixed.power:.2f}"
        )
        print(header)
        rng = np.random.default_rng(2026)
        for multiple in (0, 2, 4):
            outcomes = [
                simulate(
                    design,
                    between_cv=between,
                    within_cv=within,
                    effect=multiple * args.threshold,
                    costs=costs,
                    first_runs=5,
                    server_budget_s=math.inf,
                    rng=rng,
                )
                for _ in range(args.sequences)
            ]
            counts = Counter(str(o.verdict) for o in outcomes)
            share = {k: counts[k] / len(outcomes) for k in counts}
            minutes = float(np.mean([o.server_s for o in outcomes])) / 60
            launches = float(np.mean([o.launches for o in outcomes]))
            print(
                f"{'':>14} {multiple:>5}x {share.get('faster', 0):>7.3f} "
                f"{share.get('slower', 0):>7.3f} {share.get('equivalent', 0):>6.3f} "
                f"{share.get('inconclusive', 0):>7.3f} {launches:>8.1f} {minutes:>10.0f} "
                f"{minutes / fixed_min:>8.2f}"
            )


if __name__ == "__main__":
    main()

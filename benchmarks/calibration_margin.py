"""A calibration's margin: false verdicts where it measured less than the truth, power where
it is right.

    python benchmarks/calibration_margin.py [--n 2000] [--seed 62]

Single-launch arms (5 runs each, 2% run noise, 2% launch offset) compared through
``compare_arms`` with the server family's calibration (one run of 5 launches x 5 runs), as
``specexp compare`` and the sweep report compare them (the harness of
``tests/statistics/test_launch_variance.py``), with 1 launch of each arm's configuration in
the store (the README's default: nothing checks the calibration) and with 3 (the launch test
in place). For each, n seeded comparisons of:

- A/A with the calibration at a quarter of the arms' launch variance (1% against 2%), and
  at none of it (0 against 2%: false verdicts over all, and over those whose calibration
  estimated a launch variance above 0);
- A/A and A/B at +5% and +10% with the calibration right (2% against 2%), under the shipped
  rule and under the calibration used wherever it estimated a launch variance above 0 (the
  "exact" calibration: its own variance and degrees of freedom, no margin).

Prints each rate with its n and standard error.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Callable
from unittest import mock

import numpy as np
from scipy import stats as scipy_stats

from specexp.analysis import arms
from specexp.core.stats import Verdict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the harness in tests/
from tests.statistics.test_launch_variance import calibrated_comparison  # noqa: E402

# The harness's calibration: 5 launches (4 degrees of freedom) of 5 runs (20 within).
CALIBRATION_DF, WITHIN_DF = 4, 20
# The shown-launch-variance test at this level refuses exactly the calibrations whose launch
# variance is estimated 0 (F <= 1): the calibration used as measured, no margin.
EXACT_ALPHA = float(scipy_stats.f.sf(1.0, CALIBRATION_DF, WITHIN_DF))


def rate(
    n: int, seed: int, counted: Callable[[arms.Comparison, arms.Calibration], bool], **kwargs
) -> tuple[float, int]:
    rng = np.random.default_rng(seed)
    found = [calibrated_comparison(rng, True, **kwargs) for _ in range(n)]
    hits = [counted(c, cal) for c, cal in found if cal is not None]
    return float(np.mean(hits)), len(hits)


def false(c: arms.Comparison, _: arms.Calibration) -> bool:
    return c.verdict in (Verdict.faster, Verdict.slower)


def faster(c: arms.Comparison, _: arms.Calibration) -> bool:
    return c.verdict == Verdict.faster


def show(label: str, found: tuple[float, int]) -> None:
    p, n = found
    print(f"{label:<58} {p:7.2%}  n={n:<6} SE {math.sqrt(p * (1 - p) / n):.2%}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=62)
    args = parser.parse_args()
    n, seed = args.n, args.seed
    for launches in (1, 3):
        where = f"{launches} launch(es) of each configuration"
        show(
            f"{where}: false, calibration 1/4",
            rate(n, seed, false, launch_cv=0.01, launches=launches),
        )
        rng = np.random.default_rng(seed + 1)
        zero = [
            calibrated_comparison(rng, True, launch_cv=0.0, launches=launches) for _ in range(n)
        ]
        show(f"{where}: false, calibration 0", (float(np.mean([false(*z) for z in zero])), n))
        above = [false(*z) for z in zero if z[1] is not None and z[1].between_var > 0]
        show(
            f"{where}: false, calibration 0 estimated above 0", (float(np.mean(above)), len(above))
        )
        show(f"{where}: false, calibration right", rate(n, seed + 2, false, launches=launches))
        for exact in (False, True):
            rule = "exact" if exact else "shipped"
            with mock.patch.object(
                arms,
                "LAUNCH_VARIANCE_SHOWN_ALPHA",
                EXACT_ALPHA if exact else arms.LAUNCH_VARIANCE_SHOWN_ALPHA,
            ):
                for effect in (0.05, 0.10):
                    show(
                        f"{where}: faster at +{effect:.0%}, {rule}",
                        rate(n, seed + 3, faster, effect=effect, launches=launches),
                    )


if __name__ == "__main__":
    main()

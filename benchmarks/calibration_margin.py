"""A calibration's margin: false verdicts where it measured less than the truth, power where
it is right.

    python benchmarks/calibration_margin.py [--n 2000] [--seed 62] [--launches 1 3]
        [--cell quarter zero right gain5 gain10] [--alpha 0.2 ...]

Single-launch arms (5 runs each, 2% run noise, 2% launch offset) compared through
``compare_arms`` with the server family's calibration (one run of 5 launches x 5 runs), as
``specexp compare`` and the sweep report compare them (the harness of
``tests/statistics/test_launch_variance.py``), with 1 launch of each arm's configuration in
the store (the README's default: nothing checks the calibration) and with 3 (the launch test
in place). For each, n seeded comparisons of:

- ``quarter``: A/A with the calibration at a quarter of the arms' launch variance (1%
  against 2%);
- ``zero``: A/A with the calibration at none of it (0 against 2%): false verdicts over all,
  and over those whose calibration estimated a launch variance above 0;
- ``right``: A/A with the calibration right (2% against 2%);
- ``gain5``, ``gain10``: A/B at +5% and +10%, the calibration right, called faster under the
  rule at each ``--alpha`` (``LAUNCH_VARIANCE_SHOWN_ALPHA``; the shipped one by default) and
  under the calibration used wherever it estimated a launch variance above 0 (the "exact"
  calibration: its own variance and degrees of freedom, no margin), with their ratio.

Each comparison is made once, with the calibration used wherever it estimated a launch
variance above 0, and its calibration's F test p-value kept: the rule at level alpha gives
the same comparison's verdict where p < alpha and refuses the calibration (no verdict says
faster or slower) otherwise, so every level is read from the same comparisons, and the
ratio's comparisons called faster are a subset of the exact ones (its SE is a binomial one
over those). Prints each rate with its n and standard error.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from unittest import mock

import numpy as np
from scipy import stats as scipy_stats

from specexp.analysis import calibration
from specexp.core.stats.verdicts import Verdict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the harness in tests/
from tests.statistics.test_launch_variance import calibrated_comparison  # noqa: E402

# The harness's calibration: 5 launches (4 degrees of freedom) of 5 runs (20 within).
CALIBRATION_DF, WITHIN_DF = 4, 20
# The shown-launch-variance test at this level refuses exactly the calibrations whose launch
# variance is estimated 0 (F <= 1): the calibration used as measured, no margin.
EXACT_ALPHA = float(scipy_stats.f.sf(1.0, CALIBRATION_DF, WITHIN_DF))
# Each cell: its seed offset, and the A/A or A/B it simulates.
CELLS = {
    "quarter": (0, {"launch_cv": 0.01}),
    "zero": (1, {"launch_cv": 0.0}),
    "right": (2, {}),
    "gain5": (3, {"effect": 0.05}),
    "gain10": (3, {"effect": 0.10}),
}


def exact_comparisons(n: int, seed: int, **options) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n comparisons with the calibration used wherever it estimated a launch variance above
    0: the calibration's F test p-value (NaN without one), whether the verdict said faster or
    slower, and whether it said faster."""
    rng = np.random.default_rng(seed)
    p, decided, faster = [], [], []
    with mock.patch.object(calibration, "LAUNCH_VARIANCE_SHOWN_ALPHA", EXACT_ALPHA):
        for _ in range(n):
            c, cal = calibrated_comparison(rng, True, **options)
            p.append(math.nan if cal is None else cal.launch_variance_p)
            decided.append(c.verdict in (Verdict.faster, Verdict.slower))
            faster.append(c.verdict == Verdict.faster)
    return np.array(p), np.array(decided), np.array(faster)


def show(label: str, hits: int, n: int) -> None:
    p = hits / n if n else math.nan
    se = math.sqrt(p * (1 - p) / n) if n else math.nan
    print(f"{label:<62} {p:7.2%}  n={n:<6} SE {se:.2%}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=62)
    parser.add_argument("--launches", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--cell", choices=CELLS, nargs="+", default=list(CELLS))
    parser.add_argument(
        "--alpha", type=float, nargs="+", default=[calibration.LAUNCH_VARIANCE_SHOWN_ALPHA]
    )
    args = parser.parse_args()
    if any(not 0 < a <= EXACT_ALPHA for a in args.alpha):
        parser.error(f"--alpha: each in (0, {EXACT_ALPHA:.3f}], the exact calibration's level")
    for launches in args.launches:
        where = f"{launches} launch(es) of each configuration"
        for cell in args.cell:
            offset, options = CELLS[cell]
            p, decided, faster = exact_comparisons(
                args.n, args.seed + offset, launches=launches, **options
            )
            calibrated = ~np.isnan(p)
            above = p < EXACT_ALPHA  # estimated above 0: used by the exact calibration
            for alpha in args.alpha:
                used = p < alpha
                rule = f"at {alpha:g}"
                if cell == "zero":
                    show(
                        f"{where}: false, calibration 0, {rule}",
                        int(np.sum(decided & used)),
                        args.n,
                    )
                    show(
                        f"{where}: false, calibration 0 estimated above 0, {rule}",
                        int(np.sum(decided & used)),
                        int(np.sum(above)),
                    )
                elif cell in ("quarter", "right"):
                    show(
                        f"{where}: false, calibration {cell}, {rule}",
                        int(np.sum(decided & used)),
                        int(np.sum(calibrated)),
                    )
                else:
                    found, exact = int(np.sum(faster & used)), int(np.sum(faster & above))
                    show(f"{where}: {cell} faster, {rule}", found, args.n)
                    show(f"{where}: {cell} faster, its ratio to exact", found, exact)
            if cell.startswith("gain"):
                show(f"{where}: {cell} faster, exact", int(np.sum(faster & above)), args.n)


if __name__ == "__main__":
    main()

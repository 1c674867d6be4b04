"""The capacity ratio of two capacity-search runs of the store (the sweep report's
computation, for runs of two sweeps: `specexp compare` does not yet set searches apart):
    python results/h200/gpu-path/capacity_ratio.py STORE_URI BASELINE_RUN_ID CANDIDATE_RUN_ID"""

from __future__ import annotations

import sys

from specexp.analysis.arms import Selector, baseline_pairs, make_arms
from specexp.analysis.capacity import ArmCapacity, compare_capacity
from specexp.core.capacity import interval_text
from specexp.tracking.store import TrackingStore


def main(uri: str, baseline: str, candidate: str) -> None:
    store = TrackingStore(uri, "specexp", create=False)
    runs = store.job_runs(run_ids=[baseline, candidate], parent=None, filter_string="")
    arms, _ = make_arms(runs, label_tags=[], confidence=0.95, metric="tok_per_s")
    for arm in arms:
        fitted = ArmCapacity.of(arm)
        print(f"{arm.label} ({arm.run_id[:8]}): capacity {fitted.describe()} req/s")
    for c in compare_capacity(baseline_pairs(arms, Selector(baseline[:8])), 0.95):
        ratio = "not estimated" if c.ratio is None else f"{c.ratio:.3f}"
        print(
            f"{c.candidate.label} against {c.baseline.label}: ratio {ratio} "
            f"{interval_text(c.ci_low, c.ci_high)}, {c.verdict}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:4])

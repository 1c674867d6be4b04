"""What a sweep's budget can find, said before its first launch."""

from __future__ import annotations

import pytest

from specexp.analysis.calibration import Calibration
from specexp.core.schemas.multirun import JobOrder
from specexp.output.terminal.sweep_report import print_budget
from specexp.sweep.plan import Plan, order_jobs
from specexp.sweep.sequential import Design, budget_power, sequential_pairs
from tests.unit.test_sweep_plan import planned

BASELINE = "speculative=none"


def sweep(*overrides: str, in_process: bool = True):
    plan = Plan([planned(f"speculative={s}", *overrides) for s in ("none", "draft")])
    order_jobs(plan, JobOrder.interleaved)
    pairs = sequential_pairs(plan, BASELINE, JobOrder.interleaved, in_process)
    return budget_power(plan, BASELINE, pairs)


def test_the_default_sequential_budget_says_what_it_finds_and_that_it_misses_the_threshold(
    capsys,
):
    budget = sweep()
    assert budget is not None and budget.design == Design.sequential
    # 12 launches x 5 runs at 2% / 2% spreads: about 3.4% (tests/statistics/test_budget.py).
    assert budget.detectable == pytest.approx(0.034, abs=0.001) and budget.short
    print_budget(budget.statement, budget.short)
    line = capsys.readouterr().out.strip()
    assert line.startswith("budget: finds a 3.4% difference with power 0.8 (measured until")
    assert "assuming 2% launch-to-launch and 2% run-to-run spread" in line
    assert "; it cannot find the 1.0% threshold;" in line and "\n" not in line
    # Before anything is measured: the launch and run times it assumes, where they come
    # from, and that the power at them is not known for this family.
    assert (
        "120 server-min allow 12 launch(es) per arm at 230 s a launch and 10 s a run (assumed, "
        "as docs/statistics.md's budget figures: not measured for this server family yet): "
        "power 0.80 at 3.4%"
    ) in line
    assert line.endswith(
        "the power is unknown until calibration runs (stats.launches=3) measure this family's "
        "launch and run times"
    )


def test_an_unmeasured_budget_that_cannot_reach_its_power_even_at_the_assumed_times_warns():
    budget = sweep("stats.sequential.max_server_minutes=60")
    assert budget is not None and budget.affordable is not None
    assert not budget.affordable.measured and budget.affordable.launches == 6
    assert budget.short and "- below 0.8: 12 launches per arm take" in budget.statement
    assert "the power is unknown until calibration runs" in budget.statement


def test_a_larger_budget_finds_its_design_effect():
    budget = sweep("stats.sequential.max_launches=60")
    assert budget is not None and budget.detectable == pytest.approx(0.02)


def test_a_sequential_budget_that_finds_no_difference_says_so(capsys):
    """Two launches per arm at 99.999% find not even a +1000% difference with power 0.8
    (Student's t on one degree of freedom): the line says so, where the sweep failed at its
    start (brentq: f(a) and f(b) of one sign)."""
    budget = sweep(
        "stats.sequential.min_launches=2",
        "stats.sequential.max_launches=2",
        "stats.confidence=0.99999",
    )
    assert budget is not None and budget.design == Design.sequential
    assert budget.detectable is None and budget.affordable is None and budget.short
    print_budget(budget.statement, budget.short)
    line = capsys.readouterr().out.strip()
    assert line.startswith(
        "budget: measured until decided, at most 2 launch(es) x 5 runs per arm, finds no "
        "difference up to 1000% with power 0.8 (assuming 2% launch-to-launch"
    )
    assert line.endswith("; it cannot find the 1.0% threshold") and "\n" not in line


def test_single_launches_on_servers_of_their_own_decide_nothing_and_say_what_to_run(capsys):
    budget = sweep(in_process=False)
    assert budget is not None and budget.design == Design.single_launches
    assert budget.detectable is None and budget.short
    print_budget(budget.statement, budget.short)
    assert "stats.launches=3 measures it" in capsys.readouterr().out


def test_fixed_launches_are_judged_by_welchs_power_on_launch_means():
    budget = sweep("stats.launches=3", "stats.sequential.enabled=false")
    assert budget is not None and budget.design == Design.launches and budget.launches == 3
    assert budget.detectable is not None and 0.05 < budget.detectable < 0.2


def test_a_sweep_without_baseline_pairs_says_nothing():
    plan = Plan([planned("speculative=none")])
    assert budget_power(plan, BASELINE, []) is None


def test_a_calibration_of_the_server_family_replaces_the_assumed_spreads():
    plan = Plan([planned(f"speculative={s}") for s in ("none", "draft")])
    order_jobs(plan, JobOrder.interleaved)
    pairs = sequential_pairs(plan, BASELINE, JobOrder.interleaved, True)
    config = plan.jobs[0].job.config
    key = (plan.jobs[0].job.engine.name, config.model.name, config.stack.name, "1x cpu")
    # Launch means that hardly vary: 0.5% between launches, 1% within, 5 runs per launch.
    calm = Calibration(0.005**2 + 0.01**2 / 5, 0.01**2, 5.0, 10.0, ("abcdef123456",))
    budget = budget_power(plan, BASELINE, pairs, {key: calm}, "1x cpu")
    assert budget is not None and "calibration runs abcdef12" in budget.statement
    assert budget.spreads.between_cv == pytest.approx(0.005)
    assert budget.detectable == pytest.approx(0.02)  # the design effect: the budget suffices
    elsewhere = budget_power(plan, BASELINE, pairs, {key: calm}, "1x other")
    assert elsewhere is not None and "assuming 2% launch-to-launch" in elsewhere.statement


def test_the_budget_line_works_out_what_its_server_minutes_buy(capsys):
    """600 s launches and 25 s runs measured by the family's calibration runs: 120
    server-minutes buy 4 launches per arm, not the 12 the detectable effect is read at; the
    line says so with the power those 4 have, and warns (tests/statistics/test_budget.py
    checks that power against whole simulated sequences)."""
    plan = Plan([planned(f"speculative={s}") for s in ("none", "draft")])
    order_jobs(plan, JobOrder.interleaved)
    pairs = sequential_pairs(plan, BASELINE, JobOrder.interleaved, True)
    config = plan.jobs[0].job.config
    key = (plan.jobs[0].job.engine.name, config.model.name, config.stack.name, "1x cpu")
    slow = Calibration(
        0.02**2 + 0.02**2 / 5, 0.02**2, 5.0, 10.0, ("abcdef123456",), launch_s=600.0, run_s=25.0
    )
    budget = budget_power(plan, BASELINE, pairs, {key: slow}, "1x cpu")
    assert budget is not None and budget.affordable is not None
    assert budget.affordable.launches == 4 and budget.short
    assert budget.affordable.at_effect < 0.3 and budget.affordable.at_threshold < 0.1
    print_budget(budget.statement, budget.short)
    line = " ".join(capsys.readouterr().out.split())
    assert "120 server-min allow 4 launch(es) per arm at 600 s a launch and 25 s a run" in line
    assert "measured by calibration runs abcdef12" in line
    assert "- below 0.8: 12 launches per arm take stats.sequential.max_server_minutes=" in line
    unmeasured = sweep()
    assert unmeasured is not None and unmeasured.affordable is not None
    assert not unmeasured.affordable.measured
    assert "not measured for this server family yet" in unmeasured.statement

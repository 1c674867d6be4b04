"""Sweep planning without running anything: expansion, factors, grouping by server, order."""

from __future__ import annotations

import random

from specexp.core.schemas.multirun import JobOrder
from specexp.sweep.launch import unfinished_pairs
from specexp.sweep.plan import (
    Plan,
    PlannedJob,
    balanced_rounds,
    default_baseline,
    describe,
    expand_overrides,
    order_jobs,
    order_summary,
    overrides_for,
    plan_steps,
    with_levels,
)
from tests.conftest import compose_job


def planned(*overrides: str) -> PlannedJob:
    job = compose_job(*overrides)
    factors = [o for o in overrides if not o.startswith("model=")]
    return PlannedJob(
        list(overrides), job, job.config_fingerprint(), job.server_fingerprint(), factors
    )


def test_expansion_is_the_product_and_a_later_value_of_a_key_wins_in_its_first_place():
    jobs = expand_overrides(
        [
            "speculative=none,draft",
            "concurrency.streams=1,2,4",
            "+sweep=x",
            "concurrency.streams=1,4",
        ]
    )
    # A config the command line adds (+sweep=x) goes first: what its params add comes after.
    assert jobs == [
        ["+sweep=x", f"speculative={s}", f"concurrency.streams={c}"]
        for s in ("none", "draft")
        for c in ("1", "4")
    ]


def test_a_sweeps_params_follow_the_config_that_declares_them_and_lose_to_the_command_line():
    jobs = expand_overrides(
        ["+sweep=x", "concurrency.streams=1,2", "speculative=draft"],
        params=["+cpu_case=a,b", "speculative=none,draft"],
    )
    assert jobs == [
        ["+sweep=x", f"+cpu_case={case}", f"concurrency.streams={c}", "speculative=draft"]
        for case in ("a", "b")
        for c in ("1", "2")
    ]


def test_blocked_jobs_sharing_a_server_run_back_to_back_within_replicate_blocks():
    jobs = [
        planned(f"speculative={s}", f"concurrency.streams={c}", f"replicate={r}")
        for r in (0, 1)
        for c in (1, 2)
        for s in ("none", "draft")
    ]
    plan = Plan(jobs)
    order_jobs(plan, JobOrder.blocked)
    order = [
        (j.job.config.replicate, str(j.job.config.speculative.method), j.server_launch)
        for j in plan.jobs
    ]
    # llama.cpp's --parallel follows the streams, so each (method, streams) pair is a server.
    assert [launch for *_, launch in order] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert [r for r, *_ in order] == [0, 0, 0, 0, 1, 1, 1, 1]
    steps = plan_steps(plan.jobs, JobOrder.blocked, seed=0, in_process=True)
    assert [(s.planned, s.part) for s in steps] == [(j, None) for j in plan.jobs]
    shared = [
        planned("speculative=none", f"concurrency.requests_per_stream={n}") for n in (1, 2, 3)
    ]
    plan = Plan(shared)
    order_jobs(plan, JobOrder.blocked)
    assert {j.server_launch for j in plan.jobs} == {0} and plan.server_launches == 1
    # Told not to reuse servers, each job starts its own, and the plan says so (it once
    # said "2 server launch(es)" before a sweep that started 12).
    fresh = [
        planned(
            "speculative=none",
            f"concurrency.requests_per_stream={n}",
            "multirun.reuse_servers=false",
        )
        for n in (1, 2, 3)
    ]
    plan = Plan(fresh)
    order_jobs(plan, JobOrder.blocked)
    assert [j.server_launch for j in plan.jobs] == [0, 1, 2] and plan.server_launches == 3
    assert describe(plan)[0] == "sweep: 3 jobs, 3 to run, 3 server launch(es)"


def test_interleaved_jobs_sharing_a_server_take_turns_run_by_run_in_balanced_rounds():
    jobs = [planned("speculative=none", f"replicate={r}") for r in (0, 1)]
    jobs.append(planned("speculative=draft"))  # a server of its own: runs whole
    plan = Plan(jobs)
    order_jobs(plan, JobOrder.interleaved)
    assert [j.server_launch for j in plan.jobs] == [0, 0, 1] and plan.server_launches == 2
    steps = plan_steps(plan.jobs, JobOrder.interleaved, seed=0, in_process=True)
    turns = [(s.planned.job.config.replicate, s.part) for s in steps[:-1]]
    # Five measured runs each, in pairs of rounds that mirror each other (ABBA or BAAB), and
    # a last round; every job's parts in their order.
    order = [r for r, _ in turns]
    assert len(order) == 10 and all(
        order[i : i + 4] in ([0, 1, 1, 0], [1, 0, 0, 1]) for i in (0, 4)
    )
    assert [p for r, p in turns if r == 0] == [0, 1, 2, 3, 4] == [p for r, p in turns if r == 1]
    assert (steps[-1].planned, steps[-1].part) == (jobs[2], None)
    # Jobs in other processes cannot take turns on one server.
    assert all(s.part is None for s in plan_steps(plan.jobs, JobOrder.interleaved, 0, False))


def test_balanced_rounds_give_every_arm_the_same_mean_position_whatever_the_seed():
    for seed in range(20):
        sequence = balanced_rounds([4, 4, 4], random.Random(seed))
        positions = {arm: [i for i, a in enumerate(sequence) if a == arm] for arm in range(3)}
        assert {len(p) for p in positions.values()} == {4}
        assert len({sum(p) for p in positions.values()}) == 1  # a linear drift adds the same
    orders = {tuple(balanced_rounds([2, 2, 2], random.Random(seed))) for seed in range(20)}
    assert len(orders) > 1  # seeded, not fixed
    assert balanced_rounds([1, 3], random.Random(0)).count(1) == 3  # unequal parts: all taken


def test_jobs_with_several_launches_take_turns_launch_by_launch():
    jobs = [planned(f"speculative={s}", "stats.launches=3") for s in ("none", "draft")]
    plan = Plan(jobs)
    order_jobs(plan, JobOrder.interleaved)
    assert plan.server_launches == 6
    steps = plan_steps(plan.jobs, JobOrder.interleaved, seed=0, in_process=True)
    methods = [str(s.planned.job.config.speculative.method) for s in steps]
    assert methods[0] != methods[1] and methods[:2] == methods[3:1:-1]  # ABBA
    assert sorted(s.part for s in steps if s.planned is jobs[0]) == [0, 1, 2]


def test_a_job_is_told_its_factors_label_and_server_launch():
    job = planned("speculative=draft", "concurrency.streams=2")
    job.server_launch = 3
    overrides = overrides_for(job, "abc123")
    assert "multirun.server_launch=3" in overrides and "multirun.parent_run_id=abc123" in overrides
    assert "multirun.job_label='speculative=draft concurrency.streams=2'" in overrides
    assert "multirun.factors=['speculative=draft','concurrency.streams=2']" in overrides
    told = compose_job(*overrides)
    assert told.factors() == {"speculative": "draft", "concurrency.streams": "2"}
    assert describe(Plan([job]))[1] == "  speculative=draft concurrency.streams=2: server 3"


def test_a_concurrency_option_sweeps_its_levels_unless_the_streams_are_set_explicitly():
    assert with_levels(["speculative=none,draft"], [1, 4, 16]) == [
        "speculative=none,draft",
        "concurrency.streams=1,4,16",
    ]
    assert with_levels(["concurrency.streams=2,8", "x=1"], [1, 4]) == [
        "concurrency.streams=2,8",
        "x=1",
    ]
    assert with_levels(["+concurrency.streams=3"], [1, 4]) == ["+concurrency.streams=3"]
    assert with_levels(["speculative=draft"], []) == ["speculative=draft"]


def test_jobs_measured_until_decided_count_their_least_to_most_launches_not_the_budget():
    """The plan once said `24 server launch(es) needed` where 6 ran: the budget of a
    sequential comparison counted as if every launch were taken."""
    jobs = [planned(f"speculative={s}", "stats.launches=12") for s in ("none", "draft")]
    plan = Plan(jobs)
    order_jobs(plan, JobOrder.interleaved)
    budget = jobs[0].job.config.stats.sequential
    low, high = 2 * budget.min_launches, 2 * budget.max_launches
    assert describe(plan, jobs)[0] == (
        f"sweep: 2 jobs, 2 to run, {low} to {high} server launches (measured until decided)"
    )
    assert describe(plan)[0] == "sweep: 2 jobs, 2 to run, 24 server launch(es)"


def test_an_interleaved_sweep_where_no_job_takes_turns_says_so():
    """The order line once read `interleaved: 0 job(s) take turns`."""
    jobs = [planned("speculative=none", "engine.threads=1"), planned("speculative=draft")]
    plan = Plan(jobs)
    order_jobs(plan, JobOrder.interleaved)
    steps = plan_steps(plan.jobs, JobOrder.interleaved, seed=0, in_process=True)
    assert all(s.part is None for s in steps)
    line = order_summary(steps, JobOrder.interleaved, in_process=True)
    assert "0 job(s)" not in line and "none takes turns" in line


def test_a_sweep_over_one_factor_is_compared_with_its_first_value_unless_told_otherwise():
    pair = Plan([planned("model=tiny-pair-small", f"speculative={m}") for m in ("draft", "none")])
    streams = "concurrency.streams"
    assert default_baseline(pair, None, streams) == "speculative=draft"  # the first, as given
    assert default_baseline(pair, "speculative=none", streams) == "speculative=none"
    levels = Plan([planned("model=tiny-pair-small", f"{streams}={n}") for n in (1, 2, 4)])
    assert default_baseline(levels, None, streams) is None  # a curve, not a comparison
    two_factors = Plan(
        [
            planned("model=tiny-pair-small", f"speculative={m}", f"concurrency.streams={n}")
            for m in ("none", "draft")
            for n in (1, 2)
        ]
    )
    # Two factors: which to hold fixed is the user's call; one job: nothing to compare.
    assert default_baseline(two_factors, None, streams) is None
    single = Plan([planned("model=tiny-pair-small", "speculative=none")])
    assert default_baseline(single, None, streams) is None


def test_a_resumed_comparison_with_one_arm_finished_measures_both_again():
    """Issue 60: a comparison measured until decided whose one arm was finished (with the
    launches it had when the other failed) was dropped: the other arm was measured alone,
    and the resumed sweep made no comparison. Only a pair finished on both sides is done."""
    done = (
        planned("model=tiny-pair-small", "replicate=0"),
        planned("model=tiny-pair-small", "replicate=1"),
    )
    half = (
        planned("model=tiny-pair-small", "replicate=2"),
        planned("model=tiny-pair-small", "replicate=3"),
    )
    done[0].finished_run_id = done[1].finished_run_id = half[0].finished_run_id = "r"
    assert unfinished_pairs([done, half]) == [half]
    assert half[0].finished_run_id is None and half[1].finished_run_id is None
    assert done[0].finished_run_id == "r"

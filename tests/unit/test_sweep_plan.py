"""Sweep planning without running anything: expansion, factors, grouping by server, order."""

from __future__ import annotations

from specexp.schemas import JobOrder
from specexp.sweep import Plan, PlannedJob, describe, expand_overrides, order_jobs, overrides_for
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
    assert jobs == [
        [f"speculative={s}", f"concurrency.streams={c}", "+sweep=x"]
        for s in ("none", "draft")
        for c in ("1", "4")
    ]


def test_jobs_sharing_a_server_run_back_to_back_within_replicate_blocks():
    jobs = [
        planned(f"speculative={s}", f"concurrency.streams={c}", f"replicate={r}")
        for r in (0, 1)
        for c in (1, 2)
        for s in ("none", "draft")
    ]
    plan = Plan(jobs)
    order_jobs(plan, JobOrder.grouped, seed=0)
    order = [
        (j.job.config.replicate, str(j.job.config.speculative.method), j.server_launch)
        for j in plan.jobs
    ]
    # llama.cpp's --parallel follows the streams, so each (method, streams) pair is a server.
    assert [launch for *_, launch in order] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert [r for r, *_ in order] == [0, 0, 0, 0, 1, 1, 1, 1]
    shared = [
        planned("speculative=none", f"concurrency.requests_per_stream={n}") for n in (1, 2, 3)
    ]
    plan = Plan(shared)
    order_jobs(plan, JobOrder.grouped, seed=0)
    assert {j.server_launch for j in plan.jobs} == {0} and plan.server_launches == 1


def test_randomized_order_shuffles_servers_only_within_a_block():
    jobs = [
        planned(f"speculative={s}", f"replicate={r}")
        for r in (0, 1, 2)
        for s in ("none", "draft", "ngram")
    ]
    orders = set()
    for seed in range(6):
        plan = Plan(list(jobs))
        order_jobs(plan, JobOrder.randomized, seed=seed)
        assert [j.job.config.replicate for j in plan.jobs] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
        orders.add(tuple(str(j.job.config.speculative.method) for j in plan.jobs))
    assert len(orders) > 1


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

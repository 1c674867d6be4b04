"""The capacity report agrees with itself: its ratio is the ratio of the capacities it
prints, C1/C2 and the knee give their reason where they have no figure, the servers that
died are said at sweep level, and a sweep of searches has no empty tok/s table. Synthetic
searches shaped as capacity_gpu's on the H100 (issue 61)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specexp.analysis.report import SweepFacts, compile_sweep_report
from specexp.analysis.results import (
    JobRun,
    Metric,
    ServerDeath,
    Tag,
    capacity_points_tag,
    rate_curve_tag,
    server_deaths_tag,
)
from specexp.core.capacity import RatePoint, estimate
from specexp.core.load_curve import CurvePoint
from specexp.core.schemas.speculative import SpeculativeConfig, SpeculativeMethod
from specexp.core.schemas.stats import StatsConfig
from specexp.output.markdown import sweep_description, sweep_markdown
from specexp.output.tables import capacity_rows, death_summary

NONE = [(8, 320), (16, 320), (32, 64), (22.6, 0), (18.8, 13), (17.4, 2)]
DRAFT = [(8, 320), (8.72, 11), (9.51, 52), (11.3, 154), (16, 61)]
DEATH = ServerDeath(
    "llama-server (pid 4242) was killed by SIGABRT during run 0: CUDA error: an illegal "
    "instruction was encountered",
    0,
    False,
    8.0,
    "outputs/draft/server.log",
    False,
)


def job(name: str, method: str, runs: list[tuple[float, int]], deaths=()) -> JobRun:
    points = [RatePoint(rate, 320, good) for rate, good in runs]
    found = estimate(points, 0.9)
    factors = {"speculative": method}
    tags = {
        Tag.factors: json.dumps(factors),
        Tag.capacity_points: capacity_points_tag(points),
        Tag.server_reused: "false",
        Tag.parent: "p",
        **({Tag.server_deaths: server_deaths_tag(deaths)} if deaths else {}),
        # Energy per token as measured per rate (the run whose server died is not a point).
        Tag.rate_curve: rate_curve_tag(
            [
                CurvePoint(16, 5.0, 12.0, energy_j_per_token=0.0911),
                CurvePoint(8, 5.0, 8.0, False, 0.301),
            ]
        ),
    }
    metrics = {
        Metric.capacity_rps: found.rate,
        Metric.capacity_ci_low_rps: found.ci_low,
        Metric.capacity_ci_high_rps: found.ci_high,
        Metric.capacity_log_se: found.log_se,
        Metric.capacity_target: 0.9,
        Metric.launches: 1.0,
    }
    return JobRun(name, name, "FINISHED", "job", factors, tags, {}, metrics, (1.0, 2.0))


def report():
    facts = SweepFacts(
        parent_run_id="p",
        engine="llamacpp",
        order="interleaved",
        baseline="speculative=none",
        crossover_factor=None,
        stats=StatsConfig(),
        speculative={m: SpeculativeConfig(method=SpeculativeMethod(m)) for m in ("none", "draft")},
    )
    runs = [
        job("none", "none", NONE),
        job("draft", "draft", DRAFT, [DEATH, dataclasses.replace(DEATH, again=True, run=1)]),
    ]
    return compile_sweep_report(facts, runs, [], {})


def test_the_ratio_is_the_ratio_of_the_capacities_printed_and_every_cell_says_something():
    found = report()
    (compared,) = found.capacities
    none, draft = found.capacity_arms
    assert compared.ratio == pytest.approx(draft.rate / none.rate)
    assert compared.ci_low is not None and compared.ci_high is not None
    assert compared.ci_low <= compared.ratio <= compared.ci_high
    rows = capacity_rows(found.capacity_arms, found.capacities)
    cells = [cell for row in rows.rows for cell in row]
    # C1, C2 and the knee: a figure or the reason, never a bare "-".
    explained = ("C1 s [CI]", "C2 ms [CI]", "knee req/s [CI]", "J/token by req/s")
    columns = [rows.headers.index(name) for name in explained]
    assert all(row[i] != "-" for row in rows.rows for i in columns), rows.rows
    assert any("not monotone" in cell for cell in cells)
    energy = rows.headers.index("J/token by req/s")
    assert all(row[energy] == "8: 0.301, 16: 0.0911" for row in rows.rows)
    assert "unbounded" not in " ".join(cells)


def test_deaths_are_said_at_sweep_level_and_launches_counted_as_started():
    found = report()
    assert found.server_launches == 2 + 2  # two jobs' servers, two replacements
    said = death_summary(found)
    assert said.startswith("2 server(s) died") and "at 8 req/s" in said
    assert "1 rate(s) died there too" in said
    for text in (
        sweep_markdown(found, Metric.tok_per_s),
        sweep_description(
            found, view_link="v", run_link=lambda r: r, plot_link=lambda p: p, limit=40_000
        ),
    ):
        assert said in text and "outputs/draft/server.log" in text
        assert "illegal instruction" in text
        assert "| job |" not in text  # no empty tok/s table

"""A sweep's report holds every comparison the sweep decided, with the stack of each side:
reference_gpu's and reference_cpu's older-stack stand-ins (a case that sets the stack) are
compared with the sweep's baseline, as the console's looks compared them. On the runs an
H200 recorded (results/h200/gpu-path/reference_gpu, four comparisons measured until
decided); at 2ac0bae the report paired runs by stack too and held only the two same-stack
ones, beside a sequential table of four."""

from __future__ import annotations

import json

from specexp.analysis.report import SweepFacts, SweepReport, compile_sweep_report
from specexp.core.schemas.stats import StatsConfig
from specexp.output.markdown import sweep_description, sweep_markdown
from specexp.sweep.sequential import baseline_jobs
from tests.conftest import REPO
from tests.unit.test_sweep_composition import planned_sweep

RECORDED = REPO / "results" / "h200" / "gpu-path" / "reference_gpu" / "sweep_report.json"
OLDER = "llamacpp-cuda-nographs"


def recompiled() -> SweepReport:
    """The recorded sweep's runs and sequences compiled into a report by today's code."""
    recorded = SweepReport.from_json(json.loads(RECORDED.read_text()))
    facts = SweepFacts(
        parent_run_id=recorded.parent_run_id,
        engine=recorded.engine,
        order=recorded.order,
        baseline=recorded.baseline,
        crossover_factor=recorded.crossover_factor,
        stats=StatsConfig(),
        speculative={},
        sequences=recorded.sequences,
    )
    return compile_sweep_report(facts, [arm.run for arm in recorded.arms], [], {})


def test_every_comparison_the_sweep_decided_is_in_the_report_with_its_stacks():
    report = recompiled()
    decided = {(s.baseline_label, s.candidate_label): s.record for s in report.sequences}
    assert len(decided) == 4
    compared = {(c.baseline, c.candidate): c for c in report.comparisons}
    assert set(compared) == set(decided)
    for key, record in decided.items():
        # Judged as the sequence judged it: its verdict, its repeated interval's family.
        assert compared[key].verdict == record.verdict, key
        assert compared[key].family == 4, key
    sides = {(s.baseline, s.candidate): (s.baseline_stack, s.candidate_stack) for s in report.sides}
    assert sides[("cpu_case=baseline", "cpu_case=cuda-graphs-off")] == ("llamacpp-cuda", OLDER)
    assert sides[("cpu_case=baseline", "cpu_case=draft-pays")] == ("llamacpp-cuda",) * 2
    document = json.loads(json.dumps(report.to_json()))
    assert {(s["candidate"], s["candidate_stack"]) for s in document["sides"]} >= {
        ("cpu_case=cuda-graphs-off", OLDER),
        ("cpu_case=cuda-graphs-off-draft-costs", OLDER),
    }


def test_the_markdown_and_the_description_show_each_sides_stack():
    report = recompiled()
    rows = {
        line.split(" | ")[0].lstrip("| "): line
        for line in sweep_markdown(report, "tok_per_s").splitlines()
        if line.startswith("| cpu_case=")
    }
    assert len(rows) == 5
    assert f"| {OLDER} | 3 launches |" in rows["cpu_case=cuda-graphs-off-draft-costs"]
    assert "| llamacpp-cuda | 6 launches |" in rows["cpu_case=baseline (baseline)"]
    description = sweep_description(
        report, view_link="#v", run_link=lambda r: f"#{r}", plot_link=lambda p: p, limit=20000
    )
    assert "**Verdicts** against cpu_case=baseline: 2 faster, 2 slower" in description
    assert "| job | stack | tok/s |" in description
    older = [line for line in description.splitlines() if f"| {OLDER} |" in line]
    assert len(older) == 2 and all("| slower |" in line for line in older)


def test_the_plan_pairs_the_jobs_the_report_compares():
    """The console's comparisons (the plan's pairs, measured until decided) and the report's
    are one pairing rule: reference_gpu's plan pairs exactly what the report compares."""
    plan = planned_sweep("reference_gpu")
    planned = {(b.label, c.label) for b, c in baseline_jobs(plan, "cpu_case=baseline")}
    assert planned == {(c.baseline, c.candidate) for c in recompiled().comparisons}

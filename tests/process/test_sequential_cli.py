"""Measured until decided, on real llama.cpp servers through the CLI: an A/A on separate
launches is never called faster or slower and ends equivalent or inconclusive within its
budget. (An A/B whose effect is large, decided from its minimum: the first comparison of
docs/getting-started.md, checked by tests/process/test_getting_started.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from mlflow.tracking import MlflowClient

from specexp import cli
from specexp.core.records import structure
from specexp.core.sequential import SequentialComparison, StopReason
from specexp.core.stats.verdicts import Verdict
from tests.conftest import (
    QUICK,
    call_main,
    is_sweep,
    runs_in,
    specexp_in_process,
    sweep_parent,
)

# One server thread (the other core is the client's), short outputs.
SEQUENTIAL = (
    "-m",
    *QUICK,
    "engine.threads=1",
    "workload.max_tokens=64",
    "stats.warmup_runs=1",
    "stats.measured_runs=3",
)


def sweep(tmp_path: Path, env: dict, *overrides: str) -> tuple[list, dict, str]:
    result = specexp_in_process(*SEQUENTIAL, *overrides, cwd=tmp_path, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    uri = env["MLFLOW_TRACKING_URI"]
    runs = runs_in(uri)
    parent = sweep_parent(runs)
    path = MlflowClient(uri).download_artifacts(
        parent.info.run_id, "sweep_report/sweep_report.json", str(tmp_path / "report")
    )
    document = json.loads(Path(path).read_text())
    assert "Measured until decided" in parent.data.tags["mlflow.note.content"]
    return [r for r in runs if not is_sweep(r)], document, output


def test_an_a_a_on_separate_launches_is_never_faster_or_slower(tmp_path, tracking_env, capsys):
    jobs, document, output = sweep(
        tmp_path,
        tracking_env,
        "replicate=0,1",
        "multirun.reuse_servers=false",
        "multirun.baseline='replicate=0'",
        "stats.sequential.max_launches=4",
        # Read at 99.999%: a real A/A's false verdict stays a 1-in-100,000 event (the rate at
        # 95% is the Monte Carlo's claim: tests/statistics/test_sequential.py).
        "stats.confidence=0.99999",
    )
    (sequence,) = [structure(SequentialComparison, s) for s in document["sequences"]]
    record = sequence.record
    assert record.verdict in (Verdict.equivalent, Verdict.inconclusive)
    assert all(look.verdict not in (Verdict.faster, Verdict.slower) for look in record.looks)
    assert record.stop is not None
    if record.verdict == Verdict.inconclusive:  # it ran until its budget or its plan
        assert record.stop in (StopReason.launches, StopReason.information)
        launches = record.looks[-1].launches_baseline
        assert launches == min(record.design.max_launches, record.planned_launches or 4)
    # Launches took turns ABBA: every round, both arms, in an order the next one reverses.
    assert all(r.data.metrics["launches"] == record.looks[-1].launches_baseline for r in jobs)
    (comparison,) = document["comparisons"]
    assert comparison["verdict"] == record.verdict
    # `specexp compare` on the same launches judges them as the sweep did (issue 50, item 5):
    # its sequence's last look, not a fixed-sample test of launches gathered until decided
    # (compare's main, in this process).
    compared = call_main(
        cli.main,
        "compare",
        "--baseline",
        "replicate=0",
        "--json",
        "--no-log",
        cwd=tmp_path,
        env=tracking_env,
        capsys=capsys,
    )
    assert compared.returncode == 0, compared.stderr[-2000:]
    (again,) = json.loads(compared.stdout)["comparisons"]
    last = record.looks[-1]
    assert again["verdict"] == record.verdict
    assert (again["ci_low"], again["ci_high"]) == (last.ci_low, last.ci_high)
    assert any("measured until decided" in n["message"] for n in again["notes"])

"""Records the golden test's inputs (tests/unit/test_golden_outputs.py): what the store gave
a sweep's report back, and a job's measured runs, written by the records' own serializers.
Run once, from the repository root, when an input's format changes:

    python -m tests.unit.golden.record

The expected outputs beside them are written by the test (SPECEXP_GOLDEN_WRITE=1)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from specexp.analysis.report import SweepFacts, SweepReport
from specexp.analysis.results import (
    JobRun,
    Metric,
    RunStatus,
    Tag,
    factors_tag,
)
from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.notes import Note, NoteKind
from specexp.core.records import unstructure
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.schemas.stats import StatsConfig
from specexp.host.energy import EnergySource
from tests import energy_sweep, noise
from tests.conftest import REPO
from tests.unit import test_capacity_report

GOLDEN = Path(__file__).parent
FACTOR = "concurrency.streams"


def _store_record(
    facts: SweepFacts, reads: dict[str, Sequence[JobRun]], configuration: Sequence[JobRun] = ()
) -> dict[str, Any]:
    """A sweep as its store gave it to the report: the job runs read for each metric."""
    return {
        "facts": unstructure(facts),
        "job_runs": {metric: [r.to_json() for r in runs] for metric, runs in reads.items()},
        "configuration_runs": [r.to_json() for r in configuration],
    }


def crossover_sweep() -> dict[str, Any]:
    """Draft against none at 1, 8 and 32 streams, single launches taking turns on one
    timeline that drifts; one arm's setting did not engage, one its stack differs, one job
    failed, one finished without values."""
    means = {1: (100.0, 190.0), 8: (400.0, 300.0), 32: (900.0, 560.0)}
    runs = []
    rng = np.random.default_rng(7)
    for level_index, (streams, by_method) in enumerate(means.items()):
        for method_index, (method, mean) in enumerate(
            zip(("none", "draft"), by_method, strict=True)
        ):
            factors = {"speculative": method, FACTOR: str(streams)}
            tags = {
                Tag.factors: factors_tag(factors),
                Tag.config_fingerprint: f"{method}-{streams}",
                Tag.parent: "p0sweep",
                Tag.server_reused: "false",
                "stack.llama_cpp": "b4567" if (method, streams) != ("draft", 32) else "b4600",
            }
            if (method, streams) == ("draft", 8):
                tags[Tag.not_engaged] = "speculative"
            times = [1_000.0 + 60.0 * (6 * i + 2 * level_index + method_index) for i in range(5)]
            values = [
                float(mean * (1 + 0.0004 * (t - 1_000.0) / 60.0) * math.exp(rng.normal(0, 0.01)))
                for t in times
            ]
            runs.append(
                JobRun.from_store(
                    f"{method}{streams}run",
                    f"{method} {streams}",
                    RunStatus.finished,
                    tags,
                    {"stats.warmup_runs": "1"},
                    values,
                    [],
                    {Metric.measured_runs: 5.0, Metric.launches: 1.0},
                    times,
                )
            )
    failed_tags = {Tag.parent: "p0sweep", Tag.factors: factors_tag({"speculative": "eagle"})}
    runs.append(JobRun.from_store("eaglerun", "eagle", "FAILED", failed_tags, {}, [], []))
    runs.append(
        JobRun.from_store(
            "emptyrun",
            "ngram",
            RunStatus.finished,
            {Tag.parent: "p0sweep", Tag.factors: factors_tag({"speculative": "ngram"})},
            {},
            [],
            [],
        )
    )
    facts = SweepFacts(
        parent_run_id="p0sweep",
        engine="llamacpp",
        order="interleaved",
        baseline="speculative=none",
        crossover_factor=FACTOR,
        stats=StatsConfig(threshold=0.02),
        speculative={
            f"{m}-{s}": SpeculativeConfig(method=m) for m in ("none", "draft") for s in means
        },
    )
    return _store_record(facts, {Metric.tok_per_s: runs})


def energy_sweep_record() -> dict[str, Any]:
    """tests.energy_sweep's sweep over six levels, four launches each: speed and energy."""
    rng = np.random.default_rng(0)
    tok, joules = {}, {}
    for c in energy_sweep.LEVELS:
        for method, speed, energy in (
            ("none", 1.0, 1.0),
            ("draft", energy_sweep.speed_ratio(c), 0.8 * math.exp(0.1 * math.log2(c))),
        ):
            for values, mean in ((tok, 100 * c**0.5 * speed), (joules, energy / c**0.3)):
                drawn = noise.launches(rng, mean, 4, 3, 0.01, 0.0)
                values[(method, c)] = [float(np.mean(launch)) for launch in drawn]
    metered = {Metric.energy_shortest_window_s: 20.0, Metric.energy_unresolved_runs: 0.0}

    def parented(runs: list[JobRun]) -> list[JobRun]:
        return [dataclasses.replace(r, tags={**r.tags, Tag.parent: "p"}) for r in runs]

    return _store_record(
        energy_sweep.facts(),
        {
            Metric.tok_per_s: parented(energy_sweep.job_runs(tok, Metric.tok_per_s)),
            Metric.energy_j_per_token: parented(
                energy_sweep.job_runs(
                    joules, Metric.energy_j_per_token, EnergySource.nvml_counter, metered
                )
            ),
        },
    )


def capacity_sweep() -> dict[str, Any]:
    """tests.unit.test_capacity_report's searches: capacities, a knee, servers that died."""
    capacity = test_capacity_report
    death = capacity.DEATH
    runs = [
        capacity.job("none", "none", capacity.NONE),
        capacity.job(
            "draft",
            "draft",
            capacity.DRAFT,
            [death, dataclasses.replace(death, again=True, run=1)],
        ),
    ]
    facts = SweepFacts(
        parent_run_id="p",
        engine="llamacpp",
        order="interleaved",
        baseline="speculative=none",
        crossover_factor=None,
        stats=StatsConfig(),
        speculative={m: SpeculativeConfig(method=m) for m in ("none", "draft")},
    )
    return _store_record(facts, {Metric.tok_per_s: runs})


# Latency percentiles and their intervals, by name: figures no sweep report reads.
PERCENTILE_PARTS = ("_p50", "_p90", "_p95", "_p99", "n_eff", "chunk_gaps")


def _slim(run: JobRun) -> JobRun:
    """A recorded run without what no report reads, to keep the recording small: the
    parameters but stats.*, the latency percentiles."""
    return dataclasses.replace(
        run,
        params={k: v for k, v in run.params.items() if k.startswith("stats.")},
        metrics={k: v for k, v in run.metrics.items() if not any(p in k for p in PERCENTILE_PARTS)},
    )


def cross_stack_sweep() -> dict[str, Any]:
    """The H200's reference_gpu sweep (results/h200/gpu-path/reference_gpu): older-stack
    stand-ins against the baseline, measured until decided - the runs it read back."""
    recorded = SweepReport.from_json(
        json.loads((REPO / "results/h200/gpu-path/reference_gpu/sweep_report.json").read_text())
    )
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
    return _store_record(facts, {Metric.tok_per_s: [_slim(a.run) for a in recorded.arms]})


def single_run() -> dict[str, Any]:
    """A job of two launches of three measured runs (and a warm-up each), two streams of
    16 tokens: speculative counters, the server's accounting (two tokens short of the
    client's), energy, a busy machine in one run."""
    rng = np.random.default_rng(11)
    runs = []
    for launch in range(2):
        for run in range(4):
            warmup = run == 0
            start = 2_000.0 + 100.0 * (4 * launch + run)
            records = []
            for stream in range(2):
                ttft = round(float(0.05 + rng.uniform(0, 0.02)), 5)
                itl = [round(float(0.01 + rng.uniform(0, 0.004)), 5) for _ in range(15)]
                records.append(
                    RequestRecord(
                        run=run,
                        stream=stream,
                        warmup=warmup,
                        start_unix=start,
                        launch=launch,
                        ok=True,
                        ttft_s=ttft,
                        e2e_s=ttft + sum(itl),
                        output_tokens=16,
                        prompt_tokens=128,
                        events=16,
                        itl_s=itl,
                        finish="length",
                    )
                )
            drafts = float(rng.integers(20, 24))
            runs.append(
                RunResult(
                    run=run,
                    warmup=warmup,
                    wall_s=max(r.e2e_s or 0.0 for r in records),
                    records=records,
                    launch=launch,
                    counter_deltas={
                        "drafts": drafts,
                        "draft_tokens": 4 * drafts,
                        "accepted_tokens": float(rng.integers(30, 50)),
                    },
                    accounting_deltas={"output_tokens": 32.0},
                    started_unix=start,
                    telemetry={
                        Metric.energy_j_per_token: round(float(0.3 + rng.uniform(0, 0.02)), 4),
                        Metric.energy_resolved: 1.0,
                        Metric.energy_shortest_window_s: 0.5,
                        "cpu_other_cores": 1.5 if (launch, run) == (1, 2) else 0.1,
                    },
                    machine_warnings=[Note(NoteKind.busy_machine, "other work on the machine")]
                    if (launch, run) == (1, 2)
                    else [],
                )
            )
    measured = [r for r in runs if not r.warmup]
    return {
        "overrides": [
            "model=tiny-pair-small",
            "workload=short",
            "workload.max_tokens=16",
            "stats.launches=2",
            "stats.warmup_runs=1",
            "stats.measured_runs=3",
            "concurrency.streams=2",
            "speculative=draft",
        ],
        # The server's own accounting of the measured runs (Engine.server_accounting).
        "accounting": {
            "output_tokens": sum(r.accounting_deltas["output_tokens"] for r in measured) - 2,
            "ttft_s_mean": 0.061,
            "tpot_s_mean": 0.0118,
        },
        "cores": 16,
        "runs": [r.to_json() for r in runs],
    }


def write(name: str, record: dict[str, Any]) -> None:
    (GOLDEN / name).write_text(json.dumps(record, sort_keys=True) + "\n")


if __name__ == "__main__":
    write("sweep_crossover.input.json", crossover_sweep())
    write("sweep_energy.input.json", energy_sweep_record())
    write("sweep_capacity.input.json", capacity_sweep())
    write("sweep_cross_stack.input.json", cross_stack_sweep())
    write("run_two_launches.input.json", single_run())

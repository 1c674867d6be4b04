"""Energy per output token between arms (specexp.analysis.energy_arms), through the sweep
report as the CLI compiles it: compared as tok/s is, its own crossover beside speed's, the
report saying when they disagree, and "not measured" where nothing metered the server."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from specexp.analysis.energy_arms import EnergyReport, in_energy_words
from specexp.analysis.report import SweepReport, compile_sweep_report
from specexp.analysis.results import Metric, RunKind, RunStatus, Tag, launch_metric
from specexp.core.stats.verdicts import Verdict
from specexp.host.energy import EnergySource
from specexp.output import plots
from specexp.output.markdown import sweep_description
from specexp.output.tables import energy_rows
from specexp.output.terminal.sweep_report import print_energy
from specexp.sweep.report import sweep_report
from specexp.tracking.store import TrackingStore
from specexp.tracking.ui import NOTE
from tests import energy_sweep, noise

pytestmark = pytest.mark.unit


def sweep(energy_ratio) -> SweepReport:
    """Draft against none over six levels, 4 launches each, 1% noise (tests.energy_sweep):
    the draft stops paying in speed at 16.6 streams."""
    return energy_sweep.simulate(np.random.default_rng(0), energy_ratio)


def test_speed_and_energy_that_stop_paying_apart_are_said_to_disagree():
    """The draft saves 20% energy per token at 1 stream, 0.1 in log ratio less per doubling:
    it stops saving at 2 ** (ln 1.25 / 0.1) = 4.7 streams; speed at 16.6."""
    report = sweep(lambda c: 0.8 * math.exp(0.1 * math.log2(c)))
    energy = report.energy
    assert energy is not None and energy.measured
    (speed,), (found,) = report.crossovers, energy.crossovers
    assert found.metric == "tokens per joule"
    assert found.estimate == pytest.approx(2 ** (math.log(1.25) / 0.1), rel=0.1)
    assert speed.estimate == pytest.approx(2 ** (math.log(1.5) / 0.1), rel=0.1)
    assert found.ci_high < speed.ci_low  # what the disagreement rests on
    (said,) = energy.agreements
    assert said.disagree is True
    assert said.statement.startswith("SPEED AND ENERGY DISAGREE for speculative=draft")
    assert "faster there but draws more energy per token" in said.statement
    # Compared as tok/s is: at 1 stream the draft draws less energy per token, decided.
    at_one = next(c for c in energy.comparisons if c.candidate == "draft 1")
    assert at_one.verdict == Verdict.slower and at_one.ratio == pytest.approx(0.8, rel=0.03)
    assert at_one.plan is None  # tok/s's repetition plan is not energy's
    rows = energy_rows(energy)
    row = next(r for r in rows.rows if r[0] == "draft 1")
    assert row[rows.headers.index("verdict")] == "less energy per token"
    assert rows.marks[rows.rows.index(row)] == Verdict.faster  # drawn as the good outcome
    # The report says it in the terminal, the description and the plot's title.
    description = sweep_description(
        report, view_link="v", run_link=str, plot_link=str, limit=100_000
    )
    assert said.statement in description and "energy/crossover.png" in description
    title = plots.energy_crossover_figure(energy, report.crossovers, energy_sweep.FACTOR)
    assert "DISAGREE" in title.axes[0].get_title()


def test_speed_and_energy_that_stop_paying_together_agree():
    """At constant power joules per token are 1 / tok/s: both crossovers are one."""
    report = sweep(lambda c: 1 / energy_sweep.speed_ratio(c))
    (said,) = report.energy.agreements
    assert said.disagree is False and said.statement.startswith("speed and energy agree")


def test_the_energy_report_survives_json():
    report = sweep(lambda c: 0.8 * math.exp(0.1 * math.log2(c)))
    again = SweepReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again.energy is not None
    assert again.energy.to_json() == report.energy.to_json()


def test_a_server_nothing_metered_says_not_measured_and_gives_no_number(capsys):
    """A CPU machine without readable RAPL (this one): the runs carry no energy values."""
    tok = {(m, c): [100.0 + k for k in range(3)] for m in ("none", "draft") for c in (1, 2)}
    report = compile_sweep_report(
        energy_sweep.facts(),
        energy_sweep.job_runs(tok, Metric.tok_per_s, source=EnergySource.none),
        [],
        {},
    )
    energy = report.energy
    assert isinstance(energy, EnergyReport) and not energy.measured
    assert set(energy.sources.values()) == {"not measured"}
    assert energy.comparisons == [] and energy.crossovers == []
    assert "not measured" in energy.statement
    print_energy(energy)
    printed = capsys.readouterr().out
    assert "not measured" in printed and "J/token" not in printed
    description = sweep_description(
        report, view_link="v", run_link=str, plot_link=str, limit=100_000
    )
    assert f"**Energy:** {energy.statement}" in description


def test_runs_shorter_than_the_meter_resolves_are_counted_and_named():
    joules = {("none", 1): [1.0, 1.1, 0.9], ("draft", 1): [0.8, 0.85, 0.75]}
    tok = {key: [100.0, 101.0, 99.0] for key in joules}
    metered = {Metric.energy_shortest_window_s: 4.0, Metric.energy_unresolved_runs: 2.0}
    report = compile_sweep_report(
        energy_sweep.facts(),
        energy_sweep.job_runs(tok, Metric.tok_per_s),
        [],
        {},
        energy_runs=energy_sweep.job_runs(joules, Metric.energy_j_per_token, metrics=metered),
    )
    assert report.energy.resolution.startswith("the meter resolves a run's energy to 5% from 4.0 s")
    assert "4 of 18 measured runs were shorter (in draft 1, none 1)" in report.energy.resolution
    assert report.energy.statement.startswith(
        "per output token, from the NVML total-energy counter; the meter resolves"
    )


def test_verdicts_on_joules_per_token_are_read_in_energys_words():
    assert in_energy_words("faster") == "more energy per token"
    assert in_energy_words("slower") == "less energy per token"
    assert in_energy_words("equivalent") == "equivalent"


def test_a_job_its_meter_missed_is_named_and_the_others_are_compared():
    tok = {(m, c): [100.0, 101.0, 99.0] for m in ("none", "draft") for c in (1, 2)}
    joules = {key: [1.0, 1.1, 0.9] for key in tok if key != ("draft", 2)}
    runs = [
        *energy_sweep.job_runs(
            {k: v for k, v in tok.items() if k != ("draft", 2)}, Metric.tok_per_s
        ),
        *energy_sweep.job_runs(
            {("draft", 2): tok[("draft", 2)]}, Metric.tok_per_s, EnergySource.none
        ),
    ]
    report = compile_sweep_report(
        energy_sweep.facts(),
        runs,
        [],
        {},
        energy_runs=energy_sweep.job_runs(joules, Metric.energy_j_per_token),
    )
    energy = report.energy
    assert energy.notes == ["energy not measured for draft 2"]
    assert [c.candidate for c in energy.comparisons] == ["draft 1"]
    assert energy.crossovers == [] and "not measured" not in energy.statement


def test_the_sweep_reads_energy_from_the_store_and_publishes_it(tracking_env):
    """Job runs logged as a run logs them (per-launch energy per token, the job's summary),
    read back by the sweep's report: energy compared, the crossover beside speed's in the
    parent's description, the record and the plot."""
    store = TrackingStore(tracking_env["MLFLOW_TRACKING_URI"], "specexp")
    parent = store.start_run("sweep", {Tag.kind: RunKind.sweep})
    rng = np.random.default_rng(3)
    for c in (1, 2, 4, 8, 16, 32):
        for method, speed, energy in (
            ("none", 1.0, 1.0),
            ("draft", energy_sweep.speed_ratio(c), 0.8 * math.exp(0.1 * math.log2(c))),
        ):
            factors = {"speculative": method, energy_sweep.FACTOR: str(c)}
            job = store.start_run(
                f"{method} {c}",
                {
                    Tag.kind: RunKind.job,
                    Tag.factors: json.dumps(factors),
                    Tag.config_fingerprint: method,
                    Tag.energy_source: str(EnergySource.nvml_counter),
                },
                parent_run_id=parent.run_id,
            )
            joules = noise.runs(rng, energy / c**0.3, 3, 0.01)
            for launch, per_token in enumerate(joules):
                job.log_metrics(
                    {
                        launch_metric(Metric.tok_per_s): 100 * c**0.5 * speed * (1 + 0.01 * launch),
                        launch_metric(Metric.energy_j_per_token): per_token,
                    },
                    step=launch,
                )
            job.log_metrics(
                {
                    f"{Metric.energy_j_per_token}_mean": float(np.mean(joules)),
                    Metric.energy_shortest_window_s: 20.0,
                    Metric.energy_unresolved_runs: 0.0,
                }
            )
            job.end(RunStatus.finished)
    facts = dataclasses.replace(energy_sweep.facts(), parent_run_id=parent.run_id)
    sweep_report(store, parent, facts)
    energy = store.sweep_report(parent.run_id).energy
    assert energy.measured and len(energy.comparisons) == 6
    (said,) = energy.agreements
    assert said.disagree is True
    logged = store.client.get_run(parent.run_id)
    assert said.statement in logged.data.tags[NOTE]
    plots_logged = {a.path for a in store.client.list_artifacts(parent.run_id, "energy")}
    assert plots_logged == {"energy/crossover.png"}

"""The sweep's report: its job runs read back from the store, compiled into one value
(specexp.analysis.report), then rendered - the terminal, the parent run's description, the
report artifacts, each job's verdict - and a saved view of the runs table to read them by."""

from __future__ import annotations

from typing import Optional, Sequence

from specexp.analysis.arms import calibrations
from specexp.analysis.report import SweepFacts, compile_sweep_report
from specexp.analysis.results import FACTOR, Metric
from specexp.core.redaction import redact_text
from specexp.core.sequential import SequentialComparison
from specexp.output import terminal
from specexp.output.markdown import sweep_description
from specexp.sweep.plan import Plan
from specexp.tracking.publish import log_sweep_report
from specexp.tracking.store import MAX_TAG, RESULT_COLUMNS, RunLog, TrackingStore


def ui_address(uri: str) -> str:
    """Where the UI of the store at ``uri`` is: the tracking server's address, or for a
    local store the command that starts one on a free port and prints its address (no port
    is assumed: 5000 may be anyone's)."""
    if uri.startswith(("http://", "https://")):
        return redact_text(uri).rstrip("/") + "/"
    return f"(start it with `specexp ui --tracking-uri {redact_text(uri)}`, which prints ADDRESS) ADDRESS/"


def _view_id(parent_run_id: str) -> str:
    return f"sweep-{parent_run_id}"


def sweep_view(store: TrackingStore, parent_run_id: str, plan: Plan) -> str:
    """A saved view of the runs table with the sweep's jobs, fastest first, and the columns to
    read them by: each swept setting, then the results. Returns its link."""
    factors = dict.fromkeys(f.split("=", 1)[0] for j in plan.jobs for f in j.factors)
    return store.save_view(
        _view_id(parent_run_id),
        f"sweep {parent_run_id[:8]}: {' x '.join(factors) or 'one configuration'}",
        [f"tags.`{FACTOR}{factor}`" for factor in factors] + RESULT_COLUMNS,
        f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
        order_by=f"metrics.`{Metric.tok_per_s_mean}`",
    )


def sweep_report(
    store: TrackingStore,
    parent: RunLog,
    plan: Plan,
    baseline: Optional[str],
    order: str,
    sequences: Sequence[SequentialComparison] = (),
) -> None:
    """The sweep's report on its parent run: every job's run (resumed ones too), compared
    with the baseline when one is configured, and how their runs were ordered in time.
    Written also when jobs failed."""
    config = plan.jobs[0].job.config
    facts = SweepFacts(
        parent_run_id=parent.run_id,
        engine=plan.jobs[0].job.engine.name,
        order=order,
        baseline=baseline,
        crossover_factor=config.multirun.crossover_factor,
        stats=config.stats,
        speculative={j.fingerprint: j.job.config.speculative for j in plan.jobs},
        models={j.fingerprint: str(j.job.config.model.path) for j in plan.jobs},
        sequences=sequences,
    )
    resumed = [j.finished_run_id for j in plan.jobs if j.finished_run_id]
    children = store.job_runs(parent=parent.run_id)
    resumed_runs = store.job_runs(run_ids=resumed) if resumed else []
    under_slo = facts.crossover_factor and any(
        Metric.goodput_tok_per_s in r.metrics for r in [*children, *resumed_runs]
    )
    report = compile_sweep_report(
        facts,
        children,
        resumed_runs,
        calibrations(store.calibration_runs()),
        store.job_prompts(r.run_id for r in [*children, *resumed_runs]),
        goodput_runs=[
            *store.job_runs(parent=parent.run_id, metric=Metric.goodput_tok_per_s),
            *(store.job_runs(run_ids=resumed, metric=Metric.goodput_tok_per_s) if resumed else []),
        ]
        if under_slo
        else (),
    )
    view = store.view_link(_view_id(parent.run_id))
    terminal.print_sweep_report(
        report,
        "MLflow UI: the sweep's report is its parent run's description; its jobs, with the "
        f"columns to read them by: {ui_address(store.uri)}{view}",
    )
    description = sweep_description(
        report,
        view_link=view,
        run_link=store.run_link,
        plot_link=lambda path: f"get-artifact?path={path}&run_uuid={parent.run_id}",
        limit=MAX_TAG,
    )
    log_sweep_report(store, parent, report, description)

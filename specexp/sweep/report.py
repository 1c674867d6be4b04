"""The sweep's report: its job runs read back from the store, compiled into one value
(specexp.analysis.report), then rendered - the terminal, the parent run's description, the
report artifacts, each job's verdict - and a saved view of the runs table to read them by."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from specexp.analysis.calibration import calibrations, with_launches
from specexp.analysis.report import SweepFacts, compile_sweep_report
from specexp.analysis.results import FACTOR, Artifact, JobRun, Metric, RunStatus, Tag
from specexp.core.durable import write_atomic
from specexp.core.records import structure, unstructure
from specexp.core.redaction import redact_text
from specexp.core.sequential import SequentialComparison
from specexp.output.markdown import sweep_description
from specexp.output.terminal.sweep_report import print_sweep_report
from specexp.sweep.plan import Plan
from specexp.tracking.journal import uploaded
from specexp.tracking.publish import log_sweep_report
from specexp.tracking.store import MAX_TAG, PARENT_RUN_ID, RunLog, TrackingStore, now_ms
from specexp.tracking.ui import RESULT_COLUMNS


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
        f"tags.`{PARENT_RUN_ID}` = '{parent_run_id}'",
        order_by=f"metrics.`{Metric.tok_per_s_mean}`",
    )


def sweep_facts(
    plan: Plan,
    parent_run_id: str,
    baseline: Optional[str],
    order: str,
    sequences: Sequence[SequentialComparison] = (),
) -> SweepFacts:
    """What the report needs of the sweep beside its runs."""
    config = plan.jobs[0].job.config
    return SweepFacts(
        parent_run_id=parent_run_id,
        engine=plan.jobs[0].job.engine.name,
        order=order,
        baseline=baseline,
        crossover_factor=config.multirun.crossover_factor,
        stats=config.stats,
        speculative={j.fingerprint: j.job.config.speculative for j in plan.jobs},
        models={j.fingerprint: str(j.job.config.model.path) for j in plan.jobs},
        sequences=sequences,
        resumed=[j.finished_run_id for j in plan.jobs if j.finished_run_id],
    )


def end_sweep(
    store: TrackingStore,
    parent: RunLog,
    facts: SweepFacts,
    status: str,
    end_children: bool,
    at_ms: int,
) -> None:
    """The sweep's end in the store: its children still open ended (``end_children``: not
    Slurm's, which outlive the sweep's process), the report, the parent ended. Its metrics
    are logged at ``at_ms``, so that publishing it again logs the same points."""
    store.metric_time_ms = at_ms
    store.unabandon(parent.run_id)  # a kill while it was published: published now
    if end_children:
        # A job process that was killed could not end its run; its server is gone.
        store.end_children(parent.run_id, RunStatus.failed if status == "FINISHED" else status)
    sweep_report(store, parent, facts)
    parent.end(status)


def journal_sweep_end(
    directory: Path,
    store: TrackingStore,
    facts: SweepFacts,
    status: str,
    end_children: bool,
    at_ms: int,
) -> Path:
    """The sweep's end, for `python -m specexp.upload` (or the sweep resumed in
    ``directory``) to publish under the same parent when the store cannot take it now, or
    the sweep is killed while it publishes it."""
    path = directory / Artifact.report_journal
    write_atomic(
        path,
        json.dumps(
            {
                "tracking_uri": redact_text(store.uri),
                "experiment": store.experiment_name,
                "status": status,
                "end_children": end_children,
                "at_ms": at_ms,
                "facts": unstructure(facts),
            },
            indent=1,
        ),
    )
    return path


def replay_sweep_end(path: Path, uri: Optional[str] = None) -> str:
    """Publish a journaled sweep end (:func:`journal_sweep_end`) in the store at ``uri`` (its
    own, else), then set the journal aside as uploaded; the parent run's id."""
    journal = json.loads(path.read_text())
    store = TrackingStore(uri or journal["tracking_uri"], journal["experiment"])
    facts = structure(SweepFacts, journal["facts"])
    end_sweep(
        store,
        store.run(facts.parent_run_id),
        facts,
        journal["status"],
        journal["end_children"],
        journal.get("at_ms") or now_ms(),
    )
    path.rename(uploaded(path))
    return facts.parent_run_id


def _latest(runs: Sequence[JobRun]) -> list[JobRun]:
    """Each configuration's newest run of ``runs`` (the store's order: newest first): a sweep
    resumed in its folder keeps its one parent, whose children are its earlier attempts'
    runs too (one killed, then finished)."""
    seen: set[tuple[str, str]] = set()
    latest = []
    for run in runs:
        # With its factors: the configuration as the sweep names it, whatever the
        # fingerprint covers.
        configuration = (
            run.tags.get(Tag.config_fingerprint) or run.run_id,
            run.tags.get(Tag.factors, ""),
        )
        if configuration not in seen:
            seen.add(configuration)
            latest.append(run)
    return latest


def sweep_report(store: TrackingStore, parent: RunLog, facts: SweepFacts) -> None:
    """The sweep's report on its parent run: every job's run (resumed ones too), compared
    with the baseline when one is configured, and how their runs were ordered in time.
    Written also when jobs failed."""
    children = _latest(store.job_runs(parent=parent.run_id))
    ours = {r.run_id for r in children}
    resumed = [r for r in facts.resumed if r not in ours]  # not twice: resumed under one parent
    resumed_runs = store.job_runs(run_ids=resumed) if resumed else []
    under_slo = facts.crossover_factor and any(
        Metric.goodput_tok_per_s in r.metrics for r in [*children, *resumed_runs]
    )
    metered = any(
        f"{Metric.energy_j_per_token}_mean" in r.metrics for r in [*children, *resumed_runs]
    )
    report = compile_sweep_report(
        facts,
        children,
        resumed_runs,
        with_launches(
            calibrations(store.calibration_runs()),
            store.configuration_runs([*children, *resumed_runs]),
        ),
        store.job_prompts(r.run_id for r in [*children, *resumed_runs]),
        goodput_runs=[
            *_latest(store.job_runs(parent=parent.run_id, metric=Metric.goodput_tok_per_s)),
            *(store.job_runs(run_ids=resumed, metric=Metric.goodput_tok_per_s) if resumed else []),
        ]
        if under_slo
        else (),
        energy_runs=[
            *_latest(store.job_runs(parent=parent.run_id, metric=Metric.energy_j_per_token)),
            *(store.job_runs(run_ids=resumed, metric=Metric.energy_j_per_token) if resumed else []),
        ]
        if metered
        else (),
    )
    view = store.view_link(_view_id(parent.run_id))
    print_sweep_report(
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

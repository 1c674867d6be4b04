"""MLflow tracking: one run per job, with params, per-run metrics, summaries and artifacts;
a store's experiment, the runs it starts and hands out logs of, and its runs read back."""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from specexp.analysis.calibration import CALIBRATION_MIN_LAUNCHES
from specexp.analysis.prompts import JobPrompts
from specexp.analysis.report import SweepReport
from specexp.analysis.results import Artifact, JobRun, RunKind, RunStatus, Tag, Unit, launch_metric
from specexp.analysis.results import Metric as ResultMetric
from specexp.core.redaction import redact_text
from specexp.core.schemas.checks import ConfigError
from specexp.core.sequential import SequentialComparison
from specexp.host import owner
from specexp.tracking.address import creating, tracking_uri, uri_problem
from specexp.tracking.ui import (
    BENCHMARK_VIEW,
    CONFIGURATION_TAGS,
    EXPERIMENT_KIND,
    HISTORY_HEADING,
    NOTE,
    RESULT_COLUMNS,
    VIEW_PREFIX,
    view_state,
)

# The failure tag of a run ended by the next command because its process was killed; an
# upload of the run's journal replaces it with what the journal says.
ABANDONED = (
    "abandoned: its process ended without ending it (killed); ended by the next specexp command"
)

# The folder of a sweep parent's artifacts that holds its report (markdown, JSON, plot).
SWEEP_REPORT = "sweep_report"
GPU_CLOCK = re.compile(r"gpu\d+_sm_clock_mhz")

# MLflow rejects longer param values, and run tags (a run's description among them) longer
# than this.
_MAX_PARAM = 6000
MAX_TAG = 8000


# MLflow's own tag of a child run (mlflow.utils.mlflow_tags, named here: MLflow is optional).
PARENT_RUN_ID = Tag.parent


def now_ms() -> int:
    return int(time.time() * 1000)


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        items: dict[str, Any] = {}
        for key, value in tree.items():
            items.update(flatten(value, f"{prefix}{key}."))
        return items
    return {prefix.rstrip("."): tree}


def stored_values(values: dict[str, Any]) -> dict[str, str]:
    """Params or tags as the store (or a journal) takes them: strings, with any credential in
    them redacted - a server's URL, a swept override, a description (the config's own
    secret-named values are redacted where it is flattened, by name)."""
    return {key: redact_text(str(value)) for key, value in values.items()}


def _client_defaults(uri: str) -> None:
    """Unless the user says otherwise: no telemetry, and an unreachable tracking server is
    noticed in seconds, not after minutes of retries. A URI with credentials in it
    (http://user:password@host) keeps MLflow from printing its "View run ... at: URI" lines,
    whatever the user says: they would print the password (specexp names the run itself,
    redacted)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    if redact_text(uri) != uri:
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"


class TrackingStore:
    """One experiment of an MLflow store: starts runs, hands out their logs, reads runs back.

    ``metric_time_ms``, when set, is the time every metric is logged at rather than now: a
    report published again (its first try killed) logs the same points, which MLflow keeps
    once."""

    metric_time_ms: Optional[int] = None

    def __init__(self, uri: Optional[str], experiment: str, create: bool = True):
        self.uri, artifact_root = tracking_uri(uri)
        _client_defaults(self.uri)
        # Imported here, not with the module: the commands that write no run (help, usage
        # errors, dry runs, the doctor) start 0.8 s sooner without MLflow.
        try:
            from mlflow.tracking import MlflowClient  # noqa: PLC0415 (DEFERRED)
        except ModuleNotFoundError:  # a node without MLflow: runs go to the offline journal
            raise ModuleNotFoundError("No module named 'mlflow'", name="mlflow") from None
        problem = uri_problem(self.uri)
        if problem:
            raise ConfigError(problem)
        self.experiment_name = experiment
        with creating(self.uri):  # the client creates and migrates a new store
            self.client = MlflowClient(tracking_uri=self.uri)
            existing = self.client.get_experiment_by_name(experiment)
            if existing is not None:
                self.experiment_id = existing.experiment_id
            elif not create:
                raise ValueError(f"no experiment named {experiment!r} in {self.uri}")
            else:
                self.experiment_id = self.client.create_experiment(
                    experiment, artifact_location=artifact_root
                )
            self._present(existing.tags if existing is not None else {})

    def _present(self, tags: dict[str, str]) -> None:
        """The experiment as the UI should open it: the runs table (unless someone chose
        otherwise), a benchmark view, and a description that links to it."""
        if EXPERIMENT_KIND[0] not in tags:
            self.client.set_experiment_tag(self.experiment_id, *EXPERIMENT_KIND)
        if VIEW_PREFIX + BENCHMARK_VIEW not in tags:
            columns = [f"tags.`{t}`" for t in CONFIGURATION_TAGS] + RESULT_COLUMNS
            self.save_view(BENCHMARK_VIEW, "specexp: configurations and results", columns)
        if NOTE not in tags:
            self.client.set_experiment_tag(
                self.experiment_id,
                NOTE,
                "specexp runs: one per job, a sweep's jobs under its parent run (whose "
                f"description is the sweep's report). [Benchmark view]({self.view_link(BENCHMARK_VIEW)}): "
                "configuration, tok/s with its interval, verdict against the baseline and "
                "whether every requested setting engaged.",
            )

    def describe_history(self, markdown: str) -> None:
        """The experiment's description (its page in the UI) with its history section
        replaced by ``markdown``; what precedes that section is kept."""
        current = self.client.get_experiment(self.experiment_id).tags.get(NOTE, "")
        kept = current.split(HISTORY_HEADING)[0]
        self.client.set_experiment_tag(self.experiment_id, NOTE, kept + HISTORY_HEADING + markdown)

    def save_view(
        self,
        view_id: str,
        name: str,
        columns: Sequence[str],
        search_filter: str = "",
        order_by: str = "",
    ) -> str:
        """Save a runs-table view under the UI's saved views; returns its link."""
        now = int(time.time() * 1000)
        envelope = {
            "name": name,
            "createdAt": now,
            "updatedAt": now,
            "state": view_state(columns, search_filter, order_by),
        }
        self.client.set_experiment_tag(
            self.experiment_id, VIEW_PREFIX + view_id, json.dumps(envelope)
        )
        return self.view_link(view_id)

    # MLflow 3.17's UI shows its GenAI pages unless the link (or the user's toggle) asks for
    # model training; older MLflow 3 UIs read the experiment's kind instead.
    def view_link(self, view_id: str) -> str:
        """The UI's link (relative to its address) that opens a saved view."""
        return (
            f"#/experiments/{self.experiment_id}/runs?workflowType=machine_learning"
            f"&viewStateShareKey={view_id}"
        )

    def run_link(self, run_id: str) -> str:
        return f"#/experiments/{self.experiment_id}/runs/{run_id}?workflowType=machine_learning"

    def start_run(
        self, run_name: str, tags: dict[str, str], parent_run_id: Optional[str] = None
    ) -> RunLog:
        all_tags = stored_values(tags)
        if parent_run_id:
            all_tags[PARENT_RUN_ID] = parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=all_tags)
        return RunLog(self, run.info.run_id)

    def run(self, run_id: str) -> RunLog:
        return RunLog(self, run_id)

    def job_prompts(self, run_ids: Iterable[str]) -> dict[str, JobPrompts]:
        """The prompt-set outcomes (artifact prompts.json) of those runs that have them."""
        found = {}
        for run_id in run_ids:
            names = {a.path for a in self.client.list_artifacts(run_id)}
            if Artifact.prompts in names:
                with tempfile.TemporaryDirectory() as directory:
                    path = self.client.download_artifacts(run_id, Artifact.prompts, directory)
                    found[run_id] = JobPrompts.from_json(json.loads(Path(path).read_text()))
        return found

    def sweep_report(self, parent_run_id: str) -> SweepReport:
        """A sweep's report, as its parent run logged it (sweep_report/sweep_report.json)."""
        with tempfile.TemporaryDirectory() as directory:
            path = self.client.download_artifacts(
                parent_run_id, f"{SWEEP_REPORT}/{SWEEP_REPORT}.json", directory
            )
            return SweepReport.from_json(json.loads(Path(path).read_text()))

    def sweep_sequences(self, parent_run_id: str) -> list[SequentialComparison]:
        """The comparisons a sweep measured until decided, as its report recorded them; none
        for a run without a report (not a sweep, or one that ended before it reported)."""
        from mlflow.exceptions import MlflowException  # noqa: PLC0415 (DEFERRED)

        try:
            return list(self.sweep_report(parent_run_id).sequences)
        except (OSError, MlflowException):
            return []

    def _search(self, filter_string: str, max_results: int = 5000, **kwargs: Any) -> list:
        return self.client.search_runs(
            [self.experiment_id], filter_string, max_results=max_results, **kwargs
        )

    def finished_run(self, config_fingerprint: str) -> Optional[str]:
        """The newest finished run of a configuration (for resuming a sweep)."""
        runs = self._search(
            f"tags.{Tag.config_fingerprint} = '{config_fingerprint}' and attributes.status = "
            "'FINISHED'",
            max_results=1,
            order_by=["attributes.start_time DESC"],
        )
        return runs[0].info.run_id if runs else None

    def finished_duration_s(self, config_fingerprint: str) -> Optional[float]:
        """How long the newest finished run of a configuration took, start to end."""
        run_id = self.finished_run(config_fingerprint)
        if run_id is None:
            return None
        info = self.client.get_run(run_id).info
        return (info.end_time - info.start_time) / 1000 if info.end_time else None

    def end_abandoned(self) -> list[str]:
        """End as KILLED the runs of the experiment left RUNNING by a process of this host
        that is gone (a sweep or job killed with SIGKILL: nothing of it could end them),
        saying why; their ids."""
        ended = []
        for run in self._search(
            f"attributes.status = 'RUNNING' and tags.`{Tag.process}` LIKE '{owner.host_prefix()}%'"
        ):
            if owner.gone(run.data.tags[Tag.process]):
                self.client.set_tag(run.info.run_id, Tag.failure, ABANDONED)
                self.client.set_terminated(run.info.run_id, status=RunStatus.killed)
                ended.append(run.info.run_id)
        return ended

    def unabandon(self, run_id: str) -> None:
        """Take back :meth:`end_abandoned`'s failure tag: the run's journal, being uploaded,
        says how it ended."""
        if self.client.get_run(run_id).data.tags.get(Tag.failure) == ABANDONED:
            self.client.delete_tag(run_id, Tag.failure)

    def journaled_run(self, journal_id: str) -> Optional[str]:
        """The run an earlier upload of the journal ``journal_id`` made, if one did."""
        runs = self._search(f"tags.`{Tag.journal}` = '{journal_id}'", max_results=1)
        return runs[0].info.run_id if runs else None

    def is_sweep_parent(self, run_id: str) -> bool:
        """Whether ``run_id`` is a sweep's parent run in this store's experiment."""
        from mlflow.exceptions import MlflowException  # noqa: PLC0415 (DEFERRED)

        try:
            run = self.client.get_run(run_id)
        except MlflowException:  # not in this store
            return False
        return (
            run.info.experiment_id == self.experiment_id
            and run.data.tags.get(Tag.kind) == RunKind.sweep
        )

    def uploaded_run(self, journal: dict[str, Any]) -> Optional[str]:
        """The run an earlier upload of ``journal`` completed, if one did: the run it continues
        or the one made of it (by the journal's id), ended - not RUNNING, nor ended by
        :meth:`end_abandoned`, whose runs the upload completes."""
        from mlflow.exceptions import MlflowException  # noqa: PLC0415 (DEFERRED)

        journal_id = journal.get("id")
        run_id = journal.get("continues") or (journal_id and self.journaled_run(journal_id))
        if not run_id:
            return None
        try:
            run = self.client.get_run(run_id)
        except MlflowException:  # not in this store
            return None
        ended = run.info.status != "RUNNING" and run.data.tags.get(Tag.failure) != ABANDONED
        return run_id if ended else None

    def not_uploaded(self, journals: Iterable[Path]) -> list[Path]:
        """The job journals of ``journals`` whose runs an upload has not completed (a copy of
        one uploaded, left in a sweep's folder, is not a record the store lacks)."""
        left = []
        for journal in journals:
            try:
                done = self.uploaded_run(json.loads(journal.read_text()))
            except Exception:  # not whole (the upload names it), or the store down: left
                done = None
            if done is None:
                left.append(journal)
        return left

    def end_children(self, parent_run_id: str, status: str) -> None:
        """End the child runs of ``parent_run_id`` that are still open."""
        for run in self._search(
            f"tags.`{PARENT_RUN_ID}` = '{parent_run_id}' and attributes.status = 'RUNNING'"
        ):
            self.client.set_terminated(run.info.run_id, status=status)

    def job_runs(
        self,
        *,
        run_ids: Iterable[str] = (),
        parent: Optional[str] = None,
        filter_string: str = "",
        metric: str = ResultMetric.tok_per_s,
    ) -> list[JobRun]:
        """Job runs (sweep parents and comparisons left out), by id or by search."""
        if run_ids:
            runs = [self.client.get_run(run_id) for run_id in run_ids]
        else:
            clauses = [f"tags.`{PARENT_RUN_ID}` = '{parent}'"] if parent else []
            if filter_string:
                clauses.append(filter_string)
            runs = self._search(" and ".join(clauses))
        return [
            self._job_run(run, metric)
            for run in runs
            if run.data.tags.get(Tag.kind, RunKind.job) == RunKind.job
        ]

    def calibration_runs(self, metric: str = ResultMetric.tok_per_s) -> list[JobRun]:
        """Job runs with enough launches to calibrate launch-to-launch variance."""
        return self.job_runs(
            filter_string=f"metrics.{ResultMetric.launches} >= {CALIBRATION_MIN_LAUNCHES}",
            metric=metric,
        )

    def configuration_runs(
        self, runs: Iterable[JobRun], metric: str = ResultMetric.tok_per_s
    ) -> list[JobRun]:
        """The finished job runs of the single-launch ``runs``' configurations (their config
        fingerprints): each another launch of its configuration."""
        fingerprints = sorted(
            {f for r in runs if r.unit == Unit.run and (f := r.tags.get(Tag.config_fingerprint))}
        )
        return [
            found
            for fingerprint in fingerprints
            for found in self.job_runs(
                filter_string=f"tags.{Tag.config_fingerprint} = '{fingerprint}' and "
                "attributes.status = 'FINISHED'",
                metric=metric,
            )
        ]

    def _job_run(self, run: Any, metric: str) -> JobRun:
        def history(name: str) -> list[float]:
            return [
                m.value
                for m in sorted(
                    self.client.get_metric_history(run.info.run_id, name), key=lambda m: m.step
                )
            ]

        return JobRun.from_store(
            run.info.run_id,
            run.info.run_name,
            run.info.status,
            run.data.tags,
            run.data.params,
            history(metric),
            history(launch_metric(metric)),
            run.data.metrics,
            history(ResultMetric.midpoint_unix),
            history(launch_metric(ResultMetric.midpoint_unix)),
            self._machine(run, history),
        )

    @staticmethod
    def _machine(run: Any, history: Callable[[str], list[float]]) -> dict[str, list[float]]:
        """Per measured run, what the machine did (specexp.core.stats.drift.MACHINE_SERIES): other
        work's cores, and the slowest GPU's SM clock."""
        logged = run.data.metrics
        series = {}
        if "cpu_other_cores" in logged:
            series["cpu_other_cores"] = history("cpu_other_cores")
        clocks = [history(name) for name in sorted(logged) if GPU_CLOCK.fullmatch(name)]
        if clocks and len({len(c) for c in clocks}) == 1:
            series["gpu_sm_clock_mhz_min"] = [min(values) for values in zip(*clocks, strict=True)]
        return series


class RunLog:
    """Writes to one run of a store."""

    def __init__(self, store: TrackingStore, run_id: str):
        self.store, self.run_id = store, run_id
        self.client, self.uri = store.client, store.uri

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param  # noqa: PLC0415 (DEFERRED)

        batch = [Param(k, v[:_MAX_PARAM]) for k, v in sorted(stored_values(params).items())]
        for i in range(0, len(batch), 100):  # MLflow caps params per batch at 100
            self.client.log_batch(self.run_id, params=batch[i : i + 100])

    def log_metrics(
        self, metrics: dict[str, float], step: int = 0, timestamp_ms: Optional[int] = None
    ) -> None:
        """``timestamp_ms``: when the metrics were measured (a journal's replay), else now."""
        from mlflow.entities import Metric  # noqa: PLC0415 (DEFERRED)

        at = timestamp_ms or self.store.metric_time_ms or now_ms()
        batch = [
            Metric(k, float(v), at, step) for k, v in metrics.items() if v is not None and v == v
        ]
        for i in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def set_tags(self, tags: dict[str, Any]) -> None:
        from mlflow.entities import RunTag  # noqa: PLC0415 (DEFERRED)

        self.client.log_batch(
            self.run_id, tags=[RunTag(k, v) for k, v in stored_values(tags).items()]
        )

    def log_artifacts(self, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None:
        for path in paths:
            if path.exists():
                self.client.log_artifact(self.run_id, str(path), artifact_path)

    def end(self, status: str = RunStatus.finished) -> None:
        self.client.set_terminated(self.run_id, status=status)

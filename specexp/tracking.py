"""MLflow tracking: one run per job, with params, per-run metrics, summaries and artifacts.

The default store is SQLite under ``./mlruns`` with artifacts beside it - MLflow's supported
local backend (its plain file store is deprecated in 3.x). ``MLFLOW_TRACKING_URI`` overrides
it, as everywhere in MLflow.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Optional

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# An unreachable tracking server should be noticed in seconds, not after minutes of retries.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")

from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
REDACTED = "***"
# MLflow rejects longer param values.
_MAX_PARAM = 6000


def default_store(root: Optional[Path] = None) -> tuple[str, str]:
    """(tracking URI, artifact root) of the local store under ``root``/mlruns."""
    base = (root or Path.cwd()) / "mlruns"
    return f"sqlite:///{base / 'mlflow.db'}", (base / "artifacts").as_uri()


def uri_in_force(configured: Optional[str]) -> tuple[str, Optional[str]]:
    """The URI in force (tracking.uri, else $MLFLOW_TRACKING_URI, else the local store) and,
    for the default local store, its artifact root."""
    if configured:
        return configured, None
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], None
    return default_store()


def tracking_uri(configured: Optional[str]) -> tuple[str, Optional[str]]:
    """:func:`uri_in_force`, with the default store's directory created."""
    uri, artifacts = uri_in_force(configured)
    if artifacts is not None:
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return uri, artifacts


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Environment with values of secret-looking names replaced, for logging."""
    return {k: (REDACTED if _SECRET_NAME.search(k) else v) for k, v in env.items()}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        items: dict[str, Any] = {}
        for key, value in tree.items():
            items.update(flatten(value, f"{prefix}{key}."))
        return items
    return {prefix.rstrip("."): tree}


class Tracker:
    """A thin, explicit wrapper over MlflowClient for one job's run."""

    def __init__(self, uri: Optional[str], experiment: str, create: bool = True):
        self.uri, artifact_root = tracking_uri(uri)
        self.client = MlflowClient(tracking_uri=self.uri)
        existing = self.client.get_experiment_by_name(experiment)
        if existing is not None:
            self.experiment_id = existing.experiment_id
        elif not create:
            raise ValueError(f"no experiment named {experiment!r} in {self.uri}")
        else:
            self.experiment_id = self.client.create_experiment(experiment, artifact_location=artifact_root)
        self.run_id: Optional[str] = None

    def start(self, run_name: str, tags: dict[str, str], parent_run_id: Optional[str] = None) -> str:
        all_tags = dict(tags)
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=all_tags)
        self.run_id = run.info.run_id
        return self.run_id

    def log_params(self, params: dict[str, Any]) -> None:
        batch = [Param(k, str(v)[:_MAX_PARAM]) for k, v in sorted(params.items())]
        for i in range(0, len(batch), 100):  # MLflow caps params per batch at 100
            self.client.log_batch(self.run_id, params=batch[i:i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        import time

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None and v == v]
        for i in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[i:i + 1000])

    def set_tags(self, tags: dict[str, Any]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifacts(self, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None:
        for path in paths:
            if path.exists():
                self.client.log_artifact(self.run_id, str(path), artifact_path)

    def end(self, status: str = "FINISHED") -> None:
        if self.run_id:
            self.client.set_terminated(self.run_id, status=status)

    def end_children(self, parent_run_id: str, status: str) -> None:
        """End the child runs of ``parent_run_id`` that are still open."""
        for run in self.client.search_runs([self.experiment_id], f"tags.mlflow.parentRunId = '{parent_run_id}' "
                                           f"and attributes.status = 'RUNNING'"):
            self.client.set_terminated(run.info.run_id, status=status)


class OfflineTracker:
    """Stands in for :class:`Tracker` when the store cannot be reached: every call is written
    to a journal beside the measurements, and ``python -m specexp.upload DIR`` replays it."""

    def __init__(self, journal: Path, uri: str, experiment: str, reason: str):
        self.path, self.uri, self.experiment_id, self.run_id = journal, uri, None, "offline"
        self.journal: dict[str, Any] = {"tracking_uri": uri, "experiment": experiment, "reason": reason, "calls": []}

    def _record(self, name: str, *args: Any) -> None:
        self.journal["calls"].append([name, list(args)])
        self.path.write_text(json.dumps(self.journal, indent=1, default=str))

    def start(self, run_name: str, tags: dict[str, str], parent_run_id: Optional[str] = None) -> str:
        self._record("start", run_name, tags, parent_run_id)
        return self.run_id

    def log_params(self, params: dict[str, Any]) -> None:
        self._record("log_params", {k: str(v) for k, v in params.items()})

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        self._record("log_metrics", metrics, step)

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._record("set_tags", {k: str(v) for k, v in tags.items()})

    def log_artifacts(self, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None:
        self._record("log_artifacts", [str(p) for p in paths], artifact_path)

    def end(self, status: str = "FINISHED") -> None:
        self._record("end", status)


def replay(journal_path: Path, uri: Optional[str] = None) -> str:
    """Upload an offline journal to MLflow (its own URI, or ``uri``); returns the new run id."""
    journal = json.loads(journal_path.read_text())
    tracker = Tracker(uri or journal["tracking_uri"], journal["experiment"])
    for name, args in journal["calls"]:
        if name == "log_artifacts":
            args = [[Path(p) for p in args[0]], args[1]]
        getattr(tracker, name)(*args)
    return tracker.run_id

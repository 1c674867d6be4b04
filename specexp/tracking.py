"""MLflow tracking: one run per job, with params, per-run metrics, summaries and artifacts.

The default store is SQLite under ``./mlruns`` with artifacts beside it - MLflow's supported
local backend (its plain file store is deprecated in 3.x). ``MLFLOW_TRACKING_URI`` overrides
it, as everywhere in MLflow.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Optional

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

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


def tracking_uri(configured: Optional[str]) -> tuple[str, Optional[str]]:
    """The URI in force and, for the default local store, its artifact root."""
    if configured:
        return configured, None
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], None
    uri, artifacts = default_store()
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

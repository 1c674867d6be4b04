"""The tracking config group: where and under what names runs are tracked (MLflow)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class TrackingConfig:
    # Null: $MLFLOW_TRACKING_URI if set, else SQLite under ./mlruns with artifacts beside it.
    uri: Optional[str] = None
    experiment: str = "specexp"
    run_name: Optional[str] = None
    enabled: bool = True

"""The run config: every config group assembled into one job's config (Hydra's primary
config, conf/config.yaml, is its data), and the groups Hydra's ConfigStore gets a schema of."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING

from specexp.core.schemas.allreduce_backend import AllreduceBackendConfig
from specexp.core.schemas.attention_backend import AttentionBackendConfig
from specexp.core.schemas.concurrency import ConcurrencyConfig
from specexp.core.schemas.engine import EngineConfig, ServerSettings
from specexp.core.schemas.host import HostConfig
from specexp.core.schemas.model import ModelConfig
from specexp.core.schemas.multirun import MultirunConfig
from specexp.core.schemas.slo import SloConfig
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.schemas.stack import StackConfig
from specexp.core.schemas.stats import StatsConfig
from specexp.core.schemas.tracking import TrackingConfig
from specexp.core.schemas.workload import WorkloadConfig


@dataclass
class RunConfig:
    engine: EngineConfig = MISSING
    stack: StackConfig = MISSING
    model: ModelConfig = MISSING
    attention_backend: AttentionBackendConfig = MISSING
    allreduce_backend: AllreduceBackendConfig = MISSING
    speculative: SpeculativeConfig = MISSING
    workload: WorkloadConfig = MISSING
    concurrency: ConcurrencyConfig = MISSING
    slo: SloConfig = MISSING
    stats: StatsConfig = field(default_factory=StatsConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    dry_run: bool = False
    # Which published point(s) of a reference this run stands in for (comma-separated ids).
    reference_point: Optional[str] = None
    # Repeats an identical configuration as a separate job (A/A checks, replicate blocks).
    replicate: int = 0
    multirun: MultirunConfig = field(default_factory=MultirunConfig)
    host: HostConfig = field(default_factory=HostConfig)

    def server_settings(self) -> ServerSettings[EngineConfig]:
        return ServerSettings(
            self.engine,
            self.stack,
            self.model,
            self.attention_backend,
            self.allreduce_backend,
            self.speculative,
            self.concurrency.streams,
            self.host,
            self.workload.request_tokens_bound(),
            self.workload.caches,
            self.workload.prompts,
        )


# Config groups with a schema each; Hydra's ConfigStore gets them as GROUP/GROUP_schema.
GROUP_SCHEMAS: dict[str, type] = {
    "stack": StackConfig,
    "model": ModelConfig,
    "attention_backend": AttentionBackendConfig,
    "allreduce_backend": AllreduceBackendConfig,
    "speculative": SpeculativeConfig,
    "workload": WorkloadConfig,
    "concurrency": ConcurrencyConfig,
    "slo": SloConfig,
    "stats": StatsConfig,
    "tracking": TrackingConfig,
}

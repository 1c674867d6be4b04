"""Typed schemas for every config group, registered in Hydra's ConfigStore.

The YAML files in ``conf/`` are data; these dataclasses give them types, so a misspelt key
or a string where a number belongs fails at composition. Engine-specific settings live in
each engine's own schema (``specexp/engines/<name>.py``), registered by the engine registry.
Semantic checks that span groups (an allreduce backend on a single-process engine, EAGLE-3
without a draft) are in :func:`validate`, with messages that say what to change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from specexp import launchers  # noqa: F401  (registers the launcher presets' resolver)
from specexp.tinymodels import TinyPairSpec


class ConfigError(ValueError):
    """A composition that cannot run as asked; the message names the option and the fix."""


@dataclass
class StackConfig:
    """The environment that launches the server: interpreter, binaries, variables, versions."""

    name: str = MISSING
    description: str = ""
    # Interpreter for Python-based engines; null means the one running specexp.
    python: Optional[str] = None
    # Directory holding native engine binaries (llama-server); null means discover.
    bin_dir: Optional[str] = None
    env: dict[str, str] = field(default_factory=dict)
    # Versions the stack holds, e.g. {sglang: 0.5.9, cuda: 13.0.1}. The engine's version
    # decides flag spellings; when absent it is read from the stack's interpreter.
    versions: dict[str, str] = field(default_factory=dict)


@dataclass
class ModelConfig:
    name: str = MISSING
    # Hub id, local directory or GGUF file. Null when the model is generated.
    path: Optional[str] = None
    # A separate small draft model (speculative=draft) and an EAGLE-3 head (speculative=eagle3).
    draft_path: Optional[str] = None
    eagle3_draft_path: Optional[str] = None
    # Tensor-parallel sizes the model can be served with (memory and head-count limits).
    tensor_parallel_sizes: list[int] = field(default_factory=lambda: [1])
    trust_remote_code: bool = False
    # Set for models generated locally; path and draft_path then come from the cache.
    generate: Optional[TinyPairSpec] = None


@dataclass
class AttentionBackendConfig:
    # "auto" passes no flag and leaves the engine's default in force.
    name: str = "auto"


@dataclass
class AllreduceBackendConfig:
    # "auto" passes no flag; the others ask for one collective implementation.
    name: str = "auto"
    # The reference story ran FlashInfer's fusion together with torch symmetric memory.
    torch_symm_mem: bool = False


@dataclass
class SpeculativeConfig:
    method: str = "none"  # none | eagle3 | ngram | draft
    # Draft weights; eagle3 and draft default to the model's own via interpolation.
    draft_model: Optional[str] = None
    num_steps: int = 3
    eagle_topk: int = 1
    num_draft_tokens: int = 4
    ngram_size: int = 4


@dataclass
class WorkloadConfig:
    name: str = MISSING
    prompt: str = MISSING
    max_tokens: int = 2048
    ignore_eos: bool = True
    # Greedy decoding: with sampling, a draft that matches the target can still be rejected.
    temperature: float = 0.0
    seed: int = 0
    # Give every request its own seeded prefix, so that concurrent streams do not share a
    # prompt (and its cache); the same seed gives the same prompts in every run.
    vary_prompt: bool = False
    # A request that sends nothing for this long is ended and reported as stalled.
    stall_timeout_s: float = 120.0


@dataclass
class ConcurrencyConfig:
    name: str = MISSING
    # Streams kept in flight during one measured run; 1 is the single-stream benchmark.
    streams: int = 1
    # Requests each stream sends per measured run, back to back...
    requests_per_stream: int = 1
    # ...or, when set, as many as it can start within this many seconds.
    duration_s: Optional[float] = None


@dataclass
class StatsConfig:
    # Server launches per configuration; each gets its warm-ups and measured runs. With
    # more than one, tests use per-launch means (launch-level variance is often the largest).
    launches: int = 1
    warmup_runs: int = 2
    measured_runs: int = 5
    confidence: float = 0.95
    # Smallest relative difference worth reporting; equivalence is tested within it.
    threshold: float = 0.01
    power: float = 0.8
    # A coefficient of variation above this marks the summary as noisy.
    cv_warn: float = 0.05


@dataclass
class TrackingConfig:
    # Null: $MLFLOW_TRACKING_URI if set, else SQLite under ./mlruns with artifacts beside it.
    uri: Optional[str] = None
    experiment: str = "specexp"
    run_name: Optional[str] = None
    enabled: bool = True


@dataclass
class HostConfig:
    """What this machine lends to the servers of jobs running on it at the same time."""

    # GPU ids to lease to servers; null: $CUDA_VISIBLE_DEVICES, else every GPU nvidia-smi lists.
    gpus: Optional[list[str]] = None
    # Lock files of GPU and port leases; must be local to the host (node-local /tmp on Slurm).
    lease_dir: str = "/tmp/specexp-leases"
    # How long a job waits for GPUs that other jobs on the host hold.
    gpu_wait_s: float = 86400.0


@dataclass
class MultirunConfig:
    """How `python -m specexp -m ...` runs its jobs and reports on them."""

    # Selector of the sweep report's baseline: TAG=VALUE (e.g. speculative=none); null: no verdicts.
    baseline: Optional[str] = None
    # grouped: jobs sharing a server run back to back; randomized: also shuffle the order of
    # server configurations within each replicate block (bias control), seeded.
    order: str = "grouped"
    seed: int = 0
    reuse_servers: bool = True
    # Skip jobs whose configuration already has a finished run in the experiment.
    resume: bool = True
    # With a baseline: the swept setting along which to find where the candidate stops paying.
    crossover_factor: Optional[str] = "concurrency.streams"
    # Set by the sweeper for each job.
    parent_run_id: Optional[str] = None
    server_launch: Optional[int] = None
    job_label: Optional[str] = None


@dataclass
class RunConfig:
    engine: Any = MISSING
    stack: StackConfig = MISSING
    model: ModelConfig = MISSING
    attention_backend: AttentionBackendConfig = MISSING
    allreduce_backend: AllreduceBackendConfig = MISSING
    speculative: SpeculativeConfig = MISSING
    workload: WorkloadConfig = MISSING
    concurrency: ConcurrencyConfig = MISSING
    stats: StatsConfig = field(default_factory=StatsConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    dry_run: bool = False
    # Which published point(s) of a reference this run stands in for (comma-separated ids).
    reference_point: Optional[str] = None
    # Repeats an identical configuration as a separate job (A/A checks, replicate blocks).
    replicate: int = 0
    multirun: MultirunConfig = field(default_factory=MultirunConfig)
    host: HostConfig = field(default_factory=HostConfig)


SPECULATIVE_METHODS = ("none", "eagle3", "ngram", "draft")


def register_configs() -> None:
    """Put the schemas into Hydra's ConfigStore; YAML options extend them by name."""
    from specexp.engines import ENGINES

    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    for group, node in (
        ("stack", StackConfig),
        ("model", ModelConfig),
        ("attention_backend", AttentionBackendConfig),
        ("allreduce_backend", AllreduceBackendConfig),
        ("speculative", SpeculativeConfig),
        ("workload", WorkloadConfig),
        ("concurrency", ConcurrencyConfig),
        ("stats", StatsConfig),
        ("tracking", TrackingConfig),
    ):
        cs.store(group=group, name=f"{group}_schema", node=node)
    for engine in ENGINES.values():
        cs.store(group="engine", name=f"{engine.name}_schema", node=engine.config_class)


def validate(cfg: Any) -> None:
    """Cross-group checks that do not depend on the engine; raises :class:`ConfigError`."""
    from specexp.engines import get_engine

    engine = get_engine(cfg.engine.name)
    spec = cfg.speculative
    if spec.method not in SPECULATIVE_METHODS:
        raise ConfigError(f"speculative.method={spec.method!r} is unknown; choose one of {', '.join(SPECULATIVE_METHODS)}")
    if spec.method in ("eagle3", "draft") and not spec.draft_model:
        source = "eagle3_draft_path" if spec.method == "eagle3" else "draft_path"
        raise ConfigError(
            f"speculative={spec.method} needs a draft model, and model={cfg.model.name} has no {source}. "
            f"Set speculative.draft_model=PATH, or choose speculative=none|ngram"
            + ("|draft" if spec.method == "eagle3" and cfg.model.draft_path else "")
        )
    for name, value in (("num_steps", spec.num_steps), ("num_draft_tokens", spec.num_draft_tokens),
                        ("eagle_topk", spec.eagle_topk), ("ngram_size", spec.ngram_size)):
        if value < 1:
            raise ConfigError(f"speculative.{name} must be >= 1, got {value}")
    tp = cfg.engine.tensor_parallel_size
    if tp not in cfg.model.tensor_parallel_sizes:
        raise ConfigError(
            f"engine.tensor_parallel_size={tp} does not fit model={cfg.model.name}, which needs one of "
            f"{list(cfg.model.tensor_parallel_sizes)}; set engine.tensor_parallel_size accordingly"
        )
    if cfg.workload.max_tokens < 1:
        raise ConfigError(f"workload.max_tokens must be >= 1, got {cfg.workload.max_tokens}")
    if cfg.concurrency.streams < 1 or cfg.concurrency.requests_per_stream < 1:
        raise ConfigError(f"concurrency.streams and concurrency.requests_per_stream must be >= 1, got "
                          f"{cfg.concurrency.streams} and {cfg.concurrency.requests_per_stream}")
    if cfg.concurrency.duration_s is not None and cfg.concurrency.duration_s <= 0:
        raise ConfigError(f"concurrency.duration_s must be > 0 (or null), got {cfg.concurrency.duration_s}")
    if cfg.stats.measured_runs < 1 or cfg.stats.warmup_runs < 0 or cfg.stats.launches < 1:
        raise ConfigError(
            f"stats.measured_runs and stats.launches must be >= 1 and stats.warmup_runs >= 0, got "
            f"{cfg.stats.measured_runs}, {cfg.stats.launches} and {cfg.stats.warmup_runs}"
        )
    if cfg.multirun.order not in ("grouped", "randomized"):
        raise ConfigError(f"multirun.order={cfg.multirun.order!r} is unknown; choose grouped or randomized")
    if not 0 < cfg.stats.threshold < 1 or not 0 < cfg.stats.power < 1:
        raise ConfigError(f"stats.threshold and stats.power must be between 0 and 1, got "
                          f"{cfg.stats.threshold} and {cfg.stats.power}")
    if cfg.engine.gpus < 0 or cfg.engine.gpus < (tp if engine.multi_gpu else 0):
        raise ConfigError(f"engine.gpus={cfg.engine.gpus} cannot hold tensor parallel {tp}; set engine.gpus to at "
                          f"least engine.tensor_parallel_size")
    if not 0 < cfg.stats.confidence < 1:
        raise ConfigError(f"stats.confidence must be between 0 and 1, got {cfg.stats.confidence}")
    engine.validate(cfg)

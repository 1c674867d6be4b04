"""The model config group: the target model, its drafts, and how its weights are found
(a path, a generated pair, a packaged model, a self-draft)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING

from specexp.core.schemas.checks import ConfigError, at_least
from specexp.core.tinymodels import TinyPairSpec


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
    # The Hugging Face architecture (config.json "architectures"), for engines' rules that
    # depend on it, answered without fetching the model.
    architecture: Optional[str] = None
    # Its attention: "mla" (multi-head latent, DeepSeek-V3 family) or "mha"; engines pick
    # their attention backend by it.
    attention_arch: Optional[str] = None
    # Set for models generated locally; path and draft_path then come from the cache.
    generate: Optional[TinyPairSpec] = None
    # A trained model from the package registry (specexp.core.trainedmodels): path is its
    # checked file.
    package: Optional[str] = None
    # A self-draft: draft_path is the target's own first N blocks, written as a model.
    self_draft_layers: Optional[int] = None
    # Output tok/s per stream a run's duration is estimated at before it starts, where no
    # earlier run of its configuration says better: as measured on the setup its config
    # file names (null: ASSUMED_TOK_PER_S_PER_STREAM). An estimate only; not fingerprinted.
    expected_tok_per_s: Optional[float] = None
    # Serve the draft model alone (path := draft_path): the arm whose speed, beside the
    # target's, gives a draft arm's cost c against the speed-up bound.
    serve_draft: bool = False

    def __post_init__(self) -> None:
        if self.expected_tok_per_s is not None and self.expected_tok_per_s <= 0:
            raise ConfigError(
                f"model.expected_tok_per_s must be > 0, got {self.expected_tok_per_s}"
            )
        if self.generate is not None and self.package is not None:
            raise ConfigError(
                "model.generate and model.package both name the model's weights; set one"
            )
        if self.self_draft_layers is not None:
            at_least("model", 1, self_draft_layers=self.self_draft_layers)

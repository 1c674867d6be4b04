"""The speculative config group: the method, its draft and its shape."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Optional

from specexp.core.schemas.checks import ConfigError, at_least


class SpeculativeMethod(StrEnum):
    none = "none"
    eagle3 = "eagle3"
    ngram = "ngram"
    draft = "draft"


class NgramVariant(StrEnum):
    """How n-gram speculation finds its draft (llama.cpp's --spec-type ngram-*); vLLM's and
    SGLang's n-gram speculation is one kind each, ``simple`` here."""

    # The last n-gram looked up in the request's own tokens; the m tokens after it drafted.
    simple = "simple"
    # As simple, keeping a map of n-grams to the m-grams that followed them (k: one key).
    map_k = "map-k"
    map_k4v = "map-k4v"
    # A rolling hash of the context predicts token by token (ngram-mod).
    mod = "mod"
    # n-gram statistics of the context (and of a static corpus when given) (ngram-cache).
    cache = "cache"


@dataclass
class SpeculativeConfig:
    method: SpeculativeMethod = SpeculativeMethod.none
    # Draft weights; null: the model's own for eagle3 and draft (model.eagle3_draft_path,
    # model.draft_path), filled in with the model's files (specexp.host.job).
    draft_model: Optional[str] = None
    # Tokens drafted per verification, not counting the token the target verifies them
    # after: llama.cpp's --spec-draft-n-max, vLLM's num_speculative_tokens. (SGLang counts
    # that token too; its engine adds it.)
    num_draft_tokens: int = 4
    # Branches per draft step (SGLang's top-k; for n-grams, its BFS breadth); 1 is a chain.
    eagle_topk: int = 1
    # Draft steps (the draft tree's depth). A chain drafts one token per step, so with
    # eagle_topk 1 the steps are num_draft_tokens (null: derived so); a tree needs them set.
    num_steps: Optional[int] = None
    # Length of the n-gram matched against the prompt and output (n-gram speculation).
    ngram_size: int = 4
    ngram_variant: NgramVariant = NgramVariant.simple
    # Times an n-gram must have been seen before its continuation is drafted (llama.cpp's
    # simple and map variants).
    ngram_min_hits: int = 1
    # Dynamic speculation: no drafting once a batch holds this many requests, through the
    # engine's own per-batch-size setting (the crossover's recommended threshold); null:
    # draft at every batch size.
    switch_off_at: Optional[int] = None
    # A synthetic-acceptance arm: the engine accepts drafts at random to this mean acceptance
    # length, the target's own token included (1 to num_draft_tokens + 1), whatever the
    # draft proposes - vLLM's synthetic_acceptance_length, SGLang's SGLANG_SIMULATE_ACC_LEN
    # (TensorRT-LLM's TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS would be this less one).
    # Beside the real arm it separates engine overhead from draft quality; null: real.
    synthetic_acceptance_length: Optional[float] = None

    def __post_init__(self) -> None:
        length = self.synthetic_acceptance_length
        if length is not None and self.method == SpeculativeMethod.none:
            raise ConfigError(
                f"speculative.synthetic_acceptance_length={length} pins the acceptance of "
                "drafts, and speculative=none drafts nothing; choose a speculative method"
            )
        if length is not None and not 1 <= length <= self.num_draft_tokens + 1:
            raise ConfigError(
                f"speculative.synthetic_acceptance_length={length} is a mean acceptance length "
                f"counting the target's own token: from 1 to num_draft_tokens + 1 = "
                f"{self.num_draft_tokens + 1}"
            )
        at_least(
            "speculative",
            1,
            num_draft_tokens=self.num_draft_tokens,
            eagle_topk=self.eagle_topk,
            ngram_size=self.ngram_size,
            ngram_min_hits=self.ngram_min_hits,
            **({} if self.num_steps is None else {"num_steps": self.num_steps}),
            **({} if self.switch_off_at is None else {"switch_off_at": self.switch_off_at}),
        )
        if self.switch_off_at is not None and self.method == SpeculativeMethod.none:
            raise ConfigError(
                f"speculative.switch_off_at={self.switch_off_at} switches drafting off, and "
                "speculative=none drafts nothing; choose a speculative method or leave it null"
            )
        if self.eagle_topk == 1 and self.num_steps not in (None, self.num_draft_tokens):
            raise ConfigError(
                f"speculative.num_steps={self.num_steps} with eagle_topk=1 drafts "
                f"{self.num_steps} tokens (a chain: one per step), not num_draft_tokens="
                f"{self.num_draft_tokens}; SGLang would silently reset its draft tokens to "
                "steps + 1. Set num_steps to num_draft_tokens (or null), or eagle_topk > 1"
            )
        if self.eagle_topk > 1 and self.num_steps is None:
            raise ConfigError(
                f"speculative.eagle_topk={self.eagle_topk} drafts a tree: set "
                "speculative.num_steps (its depth)"
            )

    @property
    def steps(self) -> int:
        """Draft steps: as set, or for a chain one per drafted token."""
        return self.num_steps if self.num_steps is not None else self.num_draft_tokens

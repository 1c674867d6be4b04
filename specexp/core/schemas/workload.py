"""The workload config group: what each request sends (a prompt, a prompt set, a trace),
and whether requests share prompts and caches."""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum
from typing import Optional

from omegaconf import MISSING

from specexp.core.datasets import DatasetFormat, DatasetPrompt, load_dataset
from specexp.core.schemas.checks import ConfigError, at_least
from specexp.core.traces import Replay, TraceError, TraceFormat, load_trace, replay


class PromptReuse(StrEnum):
    """Whether requests share a prompt, and so the server's prompt (prefix) cache."""

    # Every request the same prompt: after the first it is served from the prompt cache, so
    # runs measure decoding (the reference story's single-stream benchmark).
    fixed = "fixed"
    # Every request a seeded prefix of its own: nothing is cached, TTFT includes the whole
    # prefill, and concurrent streams do not share their KV cache.
    fresh = "fresh"


class CacheUse(StrEnum):
    """What the engine's caches may carry from one measured run into the next."""

    # Only what the workload's prompts make (a fixed prompt cached in its slot or prefix
    # cache): caches that outlive requests and cost time of their own are off (llama.cpp's
    # host prompt cache, which saves idle slots before each new task), and with fresh
    # prompts prefix caches are flushed before each run, so a run starts where every other
    # one did.
    none = "none"
    # The caches are the subject (a prefix-cache study): the engine's own defaults, kept
    # from run to run.
    kept = "kept"


# The seeded prefix that gives each request a prompt of its own (workload.prompts=fresh).
PREFIX_WORDS = (
    "system latency token draft verify batch cache kernel memory stream tensor parallel "
    "request server model decode prefill accept reject queue engine throughput"
).split()
_PREFIX_LENGTH = 12


@dataclass
class TraceConfig:
    """A request trace replayed (specexp.core.traces): its arrival times (with
    concurrency=trace) and its requests' prompt and output lengths, each prompt cut to its
    length from the server's tokens of the workload's prompt set (real text)."""

    # A file (Mooncake JSONL, Azure CSV, or a run's requests.jsonl), or a shipped sample:
    # mooncake-sample, azure-sample, specexp-sample.
    source: str = MISSING
    format: TraceFormat = TraceFormat.auto
    # Replayed at this many times the trace's rate (its times divided by it).
    speedup: float = 1.0
    # The window replayed, in the trace's own seconds from its first arrival, and at most
    # this many of its requests (null: to the end, all).
    start_s: float = 0.0
    duration_s: Optional[float] = None
    limit: Optional[int] = None
    # Longer prompts and outputs are cut to these (counted in the trace's statistics):
    # the server's context must hold a request whole.
    max_input_tokens: Optional[int] = None
    max_output_tokens: Optional[int] = None

    def replay(self) -> Replay:
        """The requests one run sends; read once per process."""
        try:
            return replay(
                load_trace(self.source, self.format),
                self.speedup,
                self.start_s,
                self.duration_s,
                self.limit,
                self.max_input_tokens,
                self.max_output_tokens,
            )
        except TraceError as exc:
            raise ConfigError(f"workload.trace: {exc}") from None

    def __post_init__(self) -> None:
        if self.speedup <= 0 or self.start_s < 0:
            raise ConfigError(
                "workload.trace needs speedup > 0 and start_s >= 0, got "
                f"{self.speedup}, {self.start_s}"
            )
        for name in ("duration_s", "limit", "max_input_tokens", "max_output_tokens"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"workload.trace.{name} must be > 0 (or null), got {value}")


@dataclass
class WorkloadConfig:
    name: str = MISSING
    # The one prompt every request sends, unless a prompt set (dataset) is named.
    prompt: str = ""
    # A prompt set sent instead (specexp.core.datasets): "humaneval", or a JSONL file in
    # Spec-Bench's, ShareGPT's or a plain prompt list's format. Each run sends the set in
    # order (the k-th request of a run its k-th prompt, cycling), so every run and every
    # arm sees the same prompts and their outputs can be compared prompt by prompt.
    dataset: Optional[str] = None
    dataset_format: DatasetFormat = DatasetFormat.auto
    # Only the set's first N prompts (null: all).
    dataset_limit: Optional[int] = None
    # Send each prompt as a user message to the server's chat endpoint, which applies the
    # model's own chat template (instruct models); else as raw text to its completion one.
    chat: bool = False
    # The prompt's length in the server's own tokens: the prompt (behind its prefix when
    # fresh), tokenized by the server, repeated or cut to exactly this many tokens and sent
    # as token ids. null: the prompt text as written.
    prompt_tokens: Optional[int] = None
    prompts: PromptReuse = PromptReuse.fixed
    caches: CacheUse = CacheUse.none
    max_tokens: int = 2048
    ignore_eos: bool = True
    # Greedy decoding: with sampling, a draft that matches the target can still be rejected.
    temperature: float = 0.0
    seed: int = 0
    # A request that sends nothing for this long is ended and reported as stalled.
    stall_timeout_s: float = 120.0
    # Set: each request's prompt and output lengths come from this trace (its k-th arrival's),
    # the prompt cut from the prompt set's text; with concurrency=trace, its arrival times.
    trace: Optional[TraceConfig] = None

    def dataset_prompts(self) -> tuple[DatasetPrompt, ...]:
        """The prompt set's prompts (empty without one); read once per process."""
        if self.dataset is None:
            return ()
        return load_dataset(self.dataset, self.dataset_format, self.dataset_limit)

    def prompt_for(self, key: str) -> str:
        """The prompt text of the request ``key`` names: the workload's prompt, behind a
        seeded prefix of the request's own when prompts are fresh (same key, same prompt)."""
        if self.prompts == PromptReuse.fixed:
            return self.prompt
        return " ".join(self._rng(key).choices(PREFIX_WORDS, k=_PREFIX_LENGTH)) + ". " + self.prompt

    def prompt_ids_for(self, key: str, prompt_ids: list[int], word_ids: list[int]) -> list[int]:
        """The request's prompt as exactly ``prompt_tokens`` token ids: the server's tokens
        of the prompt (``prompt_ids``) repeated to length, behind a seeded prefix drawn from
        its tokens of the prefix words (``word_ids``) when prompts are fresh."""
        assert self.prompt_tokens is not None and prompt_ids
        prefix = (
            self._rng(key).choices(word_ids, k=_PREFIX_LENGTH)
            if self.prompts == PromptReuse.fresh
            else []
        )
        repeats = -(-self.prompt_tokens // len(prompt_ids))
        return (prefix + prompt_ids * repeats)[: self.prompt_tokens]

    def _rng(self, key: str) -> random.Random:
        return random.Random(f"{self.seed}/{key}")

    def request_tokens_bound(self) -> int:
        """Most context one request can take, in tokens: max_tokens, plus the prompt (its
        token count, or its UTF-8 bytes: no tokenizer makes more tokens than bytes, with its
        longest prefix), plus a BOS token."""
        if self.prompt_tokens is not None:
            return self.max_tokens + self.prompt_tokens + 1
        if self.trace is not None:
            return max(r.input_tokens + r.output_tokens for r in self.trace.replay().requests) + 1
        if self.dataset is not None:
            # A chat template adds its turn markers: a generous allowance for them.
            template = 256 if self.chat else 0
            longest_prompt = max(len(p.text.encode()) for p in self.dataset_prompts())
            return self.max_tokens + longest_prompt + template + 1
        longest = max(PREFIX_WORDS, key=len)
        fresh = self.prompts == PromptReuse.fresh
        prefix = len(" ".join([longest] * _PREFIX_LENGTH) + ". ") if fresh else 0
        return self.max_tokens + len(self.prompt.encode()) + prefix + 1

    def __post_init__(self) -> None:
        at_least("workload", 1, max_tokens=self.max_tokens)
        if self.trace is not None and (
            self.dataset is None or self.prompt_tokens is not None or self.chat
        ):
            raise ConfigError(
                "workload.trace sizes each prompt from the trace, cut from the prompt set's "
                "text as the server's token ids: set workload.dataset (e.g. mixed-tasks), and "
                "leave workload.prompt_tokens null and workload.chat false"
            )
        if not self.prompt and self.dataset is None:
            raise ConfigError("workload.prompt is empty and workload.dataset unset: name one")
        if self.dataset is not None and self.prompt_tokens is not None:
            raise ConfigError(
                "workload.prompt_tokens sizes the workload's one prompt; a prompt set "
                "(workload.dataset) is sent as written: leave prompt_tokens null"
            )
        if self.dataset_limit is not None:
            at_least("workload", 1, dataset_limit=self.dataset_limit)
        if self.prompt_tokens is not None:
            at_least("workload", 1, prompt_tokens=self.prompt_tokens)
        at_least("workload", 0, temperature=self.temperature)
        if self.stall_timeout_s <= 0:
            raise ConfigError(f"workload.stall_timeout_s must be > 0, got {self.stall_timeout_s}")

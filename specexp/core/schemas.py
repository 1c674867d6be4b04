"""Typed schemas of every config group: the bottom layer, pure data.

The YAML files in ``conf/`` are data; these dataclasses give them types, so a misspelt key,
an unknown choice or a string where a number belongs fails at composition, and a value out
of range fails when the composed config is converted into them (``specexp.hydra_app``,
once per job). Each range check lives in the schema that owns the field; checks that span
groups are the job's (``specexp.host.job``), and what an engine cannot honour is the engine's.
Engines subclass :class:`EngineConfig` with their own settings.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Optional, TypeVar

from omegaconf import MISSING

from specexp.core.datasets import DatasetFormat, DatasetPrompt, load_dataset
from specexp.core.tinymodels import TinyPairSpec
from specexp.core.traces import Replay, TraceError, TraceFormat, load_trace, replay


class ConfigError(ValueError):
    """A composition that cannot run as asked; the message names the option and the fix."""


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


class AttentionBackend(StrEnum):
    """Every attention backend a config group names; each engine supports a subset."""

    auto = "auto"  # passes no flag: the engine's own default stays in force
    triton = "triton"
    flashinfer = "flashinfer"
    fa3 = "fa3"
    fa4 = "fa4"
    trtllm_mha = "trtllm_mha"
    flashmla = "flashmla"
    torch_native = "torch_native"
    flash_attn = "flash_attn"
    no_flash_attn = "no_flash_attn"


class AllreduceBackend(StrEnum):
    auto = "auto"
    nccl = "nccl"
    custom = "custom"
    flashinfer_fusion = "flashinfer_fusion"
    torch_symm_mem = "torch_symm_mem"


class GpuInterconnect(StrEnum):
    nvlink = "nvlink"
    pcie = "pcie"


class JobOrder(StrEnum):
    # Arms sharing a server take turns run by run, arms with several launches launch by
    # launch, in seeded balanced rounds (ABBA): drift over time adds the same to every arm.
    interleaved = "interleaved"
    # Each job's runs back to back, jobs sharing a server next to each other: drift between
    # the arms is part of their difference (reports say so).
    blocked = "blocked"


def _at_least(owner: str, minimum: float, **values: Any) -> None:
    for name, value in values.items():
        if value < minimum:
            raise ConfigError(f"{owner}.{name} must be >= {minimum:g}, got {value}")


def _fraction(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not 0 < value < 1:
            raise ConfigError(f"{owner}.{name} must be between 0 and 1, got {value}")


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
    # The stack's engines run on the CPU (e.g. vLLM's CPU build): their servers take no GPUs.
    cpu_only: bool = False
    # Engine features the stack's build has although its version does not (patched in), by
    # the engine's feature name (e.g. SGLang's kimi_k25_eagle3).
    backports: list[str] = field(default_factory=list)


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
            _at_least("model", 1, self_draft_layers=self.self_draft_layers)


@dataclass
class EngineConfig:
    """Fields every engine has; each engine module subclasses this with its own settings."""

    name: str = MISSING
    host: str = "127.0.0.1"
    # 0 picks a free port at launch.
    port: int = 0
    tensor_parallel_size: int = 1
    # GPUs one server occupies, leased per job from host.gpus (0: a CPU server).
    gpus: int = 0
    # Seconds to wait for readiness; model load time dominates.
    ready_timeout_s: float = 120.0
    # Flags appended verbatim, for options specexp does not model.
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # A running server to measure (http[s]://host:port) instead of starting one: nothing is
    # launched, and what specexp cannot see of a server it did not start is reported unknown.
    url: Optional[str] = None
    # The environment variable that holds the server's API key, sent as a bearer token; the
    # key itself is never written anywhere.
    api_key_env: Optional[str] = None

    def __post_init__(self) -> None:
        if self.url is not None and not re.fullmatch(r"https?://[^/\s]+/?", self.url):
            raise ConfigError(
                f"engine.url must be http://HOST:PORT or https://HOST:PORT, got {self.url!r}"
            )
        _at_least("engine", 0, gpus=self.gpus, port=self.port)
        _at_least("engine", 1, tensor_parallel_size=self.tensor_parallel_size)
        if self.port > 65535 or self.ready_timeout_s <= 0:
            raise ConfigError(
                f"engine.port must be 0..65535 and engine.ready_timeout_s > 0, got {self.port} "
                f"and {self.ready_timeout_s}"
            )


@dataclass
class AttentionBackendConfig:
    name: AttentionBackend = AttentionBackend.auto


@dataclass
class AllreduceBackendConfig:
    # "auto" passes no flag; the others ask for one collective implementation.
    name: AllreduceBackend = AllreduceBackend.auto
    # The reference story ran FlashInfer's fusion together with torch symmetric memory.
    torch_symm_mem: bool = False


@dataclass
class SpeculativeConfig:
    method: SpeculativeMethod = SpeculativeMethod.none
    # Draft weights; eagle3 and draft default to the model's own via interpolation.
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
        _at_least(
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
        _at_least("workload", 1, max_tokens=self.max_tokens)
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
            _at_least("workload", 1, dataset_limit=self.dataset_limit)
        if self.prompt_tokens is not None:
            _at_least("workload", 1, prompt_tokens=self.prompt_tokens)
        _at_least("workload", 0, temperature=self.temperature)
        if self.stall_timeout_s <= 0:
            raise ConfigError(f"workload.stall_timeout_s must be > 0, got {self.stall_timeout_s}")


def requests_per_stream(
    workload: WorkloadConfig, concurrency: ConcurrencyConfig, stream: int = 0
) -> int:
    """Requests stream ``stream`` sends in a run: concurrency.requests_per_stream, or with a
    prompt set its share of the set (stream s takes prompts s, s + streams, ...) that many
    times, so that a run sends every prompt once per requests_per_stream. Stream 0 has the
    largest share."""
    if workload.dataset is None:
        return concurrency.requests_per_stream
    prompts = load_dataset(
        str(workload.dataset), DatasetFormat(workload.dataset_format), workload.dataset_limit
    )
    share = len(range(stream, len(prompts), concurrency.streams))
    return concurrency.requests_per_stream * max(1, share)


# The rate a run's duration is estimated at when neither an earlier run of its configuration
# nor model.expected_tok_per_s says better: output tokens per second per stream.
ASSUMED_TOK_PER_S_PER_STREAM = 50.0


def run_requests(workload: WorkloadConfig, concurrency: ConcurrencyConfig) -> Optional[int]:
    """Requests one run sends (None: as many as fit its duration_s)."""
    if concurrency.duration_s:
        return None
    if concurrency.open_loop:
        return concurrency.arrivals
    return sum(requests_per_stream(workload, concurrency, s) for s in range(concurrency.streams))


def expected_run_seconds(
    workload: WorkloadConfig, concurrency: ConcurrencyConfig, tok_per_s: float
) -> float:
    """How long one run takes at ``tok_per_s`` per stream: its duration, its arrivals at
    their rate (a capacity search's at its start rate, the search's first), or its longest
    stream's requests at max_tokens each."""
    if concurrency.duration_s:
        return concurrency.duration_s
    rate = concurrency.rate or (concurrency.search.start_rate if concurrency.search else None)
    if concurrency.open_loop and rate:
        return concurrency.arrivals / rate
    tokens = requests_per_stream(workload, concurrency, 0) * workload.max_tokens
    return tokens / tok_per_s


class Arrival(StrEnum):
    """How a run's requests are started: by streams that each send the next when the last
    ends (closed loop), or at times of their own whatever the server does (open loop)."""

    closed = "closed"
    poisson = "poisson"  # exponential gaps of mean 1/rate, seeded
    uniform = "uniform"  # a fixed schedule: one request every 1/rate seconds
    trace = "trace"  # the arrival times of workload.trace, replayed


@dataclass
class CapacitySearchConfig:
    """The search for the highest arrival rate whose SLO attainment stays at or above
    ``slo.target``: each measured run is one rate, chosen from the runs before it (bracket
    by doubling or halving, then bisect in log rate); ``stats.measured_runs`` is its budget."""

    start_rate: float = 1.0
    min_rate: float = 0.01
    max_rate: float = 1000.0
    # Once the bracket is this narrow (high / low - 1), runs go either side of the fitted
    # capacity (never at or above a rate that failed).
    precision: float = 0.1
    # Each run stops sending arrivals once its attainment against slo.target is decided
    # (a sequential test; concurrency.arrivals is its cap), not before 2 x concurrency.streams.
    stop_when_decided: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.min_rate <= self.start_rate <= self.max_rate:
            raise ConfigError(
                "concurrency.search needs 0 < min_rate <= start_rate <= max_rate, got "
                f"{self.min_rate}, {self.start_rate}, {self.max_rate}"
            )
        if self.precision <= 0:
            raise ConfigError(f"concurrency.search.precision must be > 0, got {self.precision}")


@dataclass
class ConcurrencyConfig:
    name: str = MISSING
    # Streams kept in flight during one measured run; 1 is the single-stream benchmark.
    streams: int = 1
    # The levels a sweep measures, one job each (concurrency.streams set to each), unless
    # the sweep or the command line sets concurrency.streams itself; empty: ``streams`` only.
    levels: list[int] = field(default_factory=list)
    # Requests each stream sends per measured run, back to back...
    requests_per_stream: int = 1
    # ...or, when set, as many as it can start within this many seconds.
    duration_s: Optional[float] = None
    # Client processes the streams are shared over (one event loop each); null: one per 64
    # streams, at most one per CPU core. One loop keeps up with about 64 streams at 500
    # tokens/s each; past that its timestamps lag (benchmarks/client_capacity.py).
    client_processes: Optional[int] = None
    # Open loop: requests arrive at ``rate`` per second (poisson or uniform), ``arrivals`` per
    # measured run, each sent when due however many are still in flight; ``seed`` seeds the
    # arrival times (each run's own, the same in every arm). ``streams`` then sizes only the
    # server (the requests it serves at once, e.g. llama.cpp's slots; more wait in its queue).
    arrival: Arrival = Arrival.closed
    rate: Optional[float] = None
    arrivals: int = 32
    seed: int = 0
    # Set: each measured run's rate is chosen by the capacity search (open loop only).
    search: Optional[CapacitySearchConfig] = None

    @property
    def open_loop(self) -> bool:
        return self.arrival != Arrival.closed

    def processes(self) -> int:
        if self.client_processes is not None:
            return self.client_processes
        if self.open_loop:  # how many will be in flight is the server's doing: one loop
            return 1
        return max(1, min(os.cpu_count() or 1, -(-self.streams // 64)))

    def __post_init__(self) -> None:
        _at_least(
            "concurrency", 1, streams=self.streams, requests_per_stream=self.requests_per_stream
        )
        if self.client_processes is not None:
            _at_least("concurrency", 1, client_processes=self.client_processes)
        if any(level < 1 for level in self.levels) or len(set(self.levels)) < len(self.levels):
            raise ConfigError(
                f"concurrency.levels must be distinct stream counts >= 1, got {self.levels}"
            )
        if self.duration_s is not None and self.duration_s <= 0:
            raise ConfigError(
                f"concurrency.duration_s must be > 0 (or null), got {self.duration_s}"
            )
        if self.open_loop:
            _at_least("concurrency", 1, arrivals=self.arrivals)
            if self.duration_s is not None:
                raise ConfigError(
                    "concurrency.duration_s is for closed-loop streams; an open-loop run sends "
                    "concurrency.arrivals requests"
                )
            if self.arrival == Arrival.trace and (self.rate is not None or self.search is not None):
                raise ConfigError(
                    "concurrency.arrival=trace replays the trace's arrival times: leave "
                    "concurrency.rate and concurrency.search null (workload.trace.speedup "
                    "scales the rate)"
                )
            if (
                self.arrival != Arrival.trace
                and self.search is None
                and (self.rate is None or self.rate <= 0)
            ):
                raise ConfigError(
                    f"concurrency.arrival={self.arrival} needs concurrency.rate > 0 (requests "
                    "per second) or concurrency.search"
                )
        elif self.rate is not None or self.search is not None:
            raise ConfigError(
                "concurrency.rate and concurrency.search are for open-loop arrivals: set "
                "concurrency.arrival=poisson (or uniform)"
            )


@dataclass
class SequentialConfig:
    """Comparisons measured until decided (specexp.core.sequential): arms on servers of their
    own take turns launch by launch (ABBA), tested after every round with intervals that
    hold over all looks, until the interval decides or the budget is spent."""

    enabled: bool = True
    # Launches per arm before the first look (three: with two, Welch's t has one or two
    # degrees of freedom and the first look can hardly decide), and at most.
    min_launches: int = 3
    max_launches: int = 12
    # Server time the whole comparison may take (every arm's launches, start-up included).
    max_server_minutes: float = 120.0
    # The relative effect found with stats.power when the sequence runs full; null: twice
    # stats.threshold.
    design_effect: Optional[float] = None
    spending: str = "pocock"  # pocock | obrien_fleming

    def __post_init__(self) -> None:
        _at_least("stats.sequential", 2, min_launches=self.min_launches)
        if self.max_launches < self.min_launches:
            raise ConfigError(
                f"stats.sequential.max_launches ({self.max_launches}) must be at least "
                f"min_launches ({self.min_launches})"
            )
        if self.max_server_minutes <= 0:
            raise ConfigError(
                f"stats.sequential.max_server_minutes must be > 0, got {self.max_server_minutes}"
            )
        if self.design_effect is not None and self.design_effect <= 0:
            raise ConfigError(
                f"stats.sequential.design_effect must be > 0 (or null), got {self.design_effect}"
            )
        if self.spending not in ("pocock", "obrien_fleming"):
            raise ConfigError(
                f"stats.sequential.spending must be pocock or obrien_fleming, got {self.spending!r}"
            )


@dataclass
class SloConfig:
    """Service levels a request must meet, every one that is set, to count as good: its
    time to first token, its inter-token latency (its mean, or a percentile of its own gaps),
    its end-to-end latency. Goodput is the requests (and their tokens) per second that met
    them; attainment, the share that did. ``target``: the attainment capacity is read at."""

    name: str = MISSING
    ttft_s: Optional[float] = None
    itl_s: Optional[float] = None
    # Null: the request's mean inter-token latency; else this percentile (0-100) of its gaps.
    itl_percentile: Optional[float] = None
    e2e_s: Optional[float] = None
    target: float = 0.9

    @property
    def defined(self) -> bool:
        return any(v is not None for v in (self.ttft_s, self.itl_s, self.e2e_s))

    def __post_init__(self) -> None:
        for key in ("ttft_s", "itl_s", "e2e_s"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ConfigError(f"slo.{key} must be > 0 seconds (or null), got {value}")
        if self.itl_percentile is not None and not 0 < self.itl_percentile <= 100:
            raise ConfigError(f"slo.itl_percentile must be in (0, 100], got {self.itl_percentile}")
        _fraction("slo", target=self.target)


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
    # Seconds between samples of the machine (CPU load; the server's GPUs through NVML)
    # while runs are measured; 0: no telemetry.
    telemetry_interval_s: float = 0.5
    # Before each run the client waits until the server holds no request and has done its
    # work after the last one (its own gauges say so), at most this long; a run that still
    # starts on a busy server is flagged.
    idle_timeout_s: float = 30.0
    # How a sweep's comparisons of arms on servers of their own are measured.
    sequential: SequentialConfig = field(default_factory=SequentialConfig)

    def __post_init__(self) -> None:
        _at_least("stats", 1, measured_runs=self.measured_runs, launches=self.launches)
        _at_least(
            "stats",
            0,
            warmup_runs=self.warmup_runs,
            telemetry_interval_s=self.telemetry_interval_s,
            idle_timeout_s=self.idle_timeout_s,
        )
        _fraction("stats", confidence=self.confidence, threshold=self.threshold, power=self.power)

    @property
    def parts(self) -> int:
        """The pieces a job is measured in, so that an interleaved sweep can alternate them
        with other jobs' pieces: one per launch with several launches (each on a new server),
        else one per measured run (the first with the warm-ups) on one server."""
        return self.launches if self.launches > 1 else self.measured_runs


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
    # CPU cores to lease to CPU servers (each takes as many as it runs threads); null: the
    # cores this process may run on.
    cpus: Optional[list[int]] = None
    # Lock files of GPU, core and port leases; must be local to the host (node-local /tmp on
    # Slurm).
    lease_dir: str = "/tmp/specexp-leases"
    # How long a job waits for GPUs or cores that other jobs on the host hold.
    lease_wait_s: float = 86400.0
    # The GPUs' compute capability (e.g. "9.0" H100/H200, "10.0" B200, "12.0" RTX PRO 6000)
    # and how they are connected, so that what an engine decides by itself from them can be
    # predicted before launch; null: unknown (the dry run says what that leaves open).
    gpu_compute_capability: Optional[str] = None
    gpu_interconnect: Optional[GpuInterconnect] = None


@dataclass
class MultirunConfig:
    """How `python -m specexp -m ...` runs its jobs and reports on them."""

    # Selector of the sweep report's baseline: FACTOR=VALUE (e.g. speculative=none); null: the
    # swept factor's first value when the sweep varies one factor, else no verdicts.
    baseline: Optional[str] = None
    order: JobOrder = JobOrder.interleaved
    # Seeds the order of each round of interleaved parts.
    seed: int = 0
    reuse_servers: bool = True
    # Skip jobs that a sweep into this hydra.sweep.dir already finished (each job
    # directory's run.json names its run); a new directory measures every job.
    resume: bool = True
    # Another sweep directory whose finished jobs count as done here too (a sweep measured
    # elsewhere, or parts copied back from a lost machine into a new directory).
    resume_from: Optional[str] = None
    # With a baseline: the swept setting along which to find where the candidate stops paying.
    crossover_factor: Optional[str] = "concurrency.streams"
    # The threshold the *_switch_off speculative options draft below (a crossover's
    # recommended switch-off), so that they can be swept beside the arms they are checked on.
    switch_off_at: Optional[int] = None
    # Set by the sweeper for each job.
    parent_run_id: Optional[str] = None
    server_launch: Optional[int] = None
    job_label: Optional[str] = None
    # Interleaved: the one part of the job (see StatsConfig.parts) this invocation measures.
    part: Optional[int] = None
    # Measured runs of this part's launch, when a sequential comparison plans them.
    part_runs: Optional[int] = None
    # The job's swept settings as FACTOR=VALUE overrides (what sets it apart in the sweep).
    factors: list[str] = field(default_factory=list)


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


# The engine's own EngineConfig subclass, which each engine module types its settings by.
EngineConfigT = TypeVar("EngineConfigT", bound=EngineConfig)


@dataclass(frozen=True)
class ServerSettings(Generic[EngineConfigT]):
    """What an engine is told: everything that shapes the server, and nothing else."""

    engine: EngineConfigT
    stack: StackConfig
    model: ModelConfig
    attention_backend: AttentionBackendConfig
    allreduce_backend: AllreduceBackendConfig
    speculative: SpeculativeConfig
    # Concurrent streams the server must serve at once (engines that size slots by it).
    streams: int
    # The host's declared GPUs (what engines' own resolution depends on).
    host: Optional[HostConfig] = None
    # Most context one request can take (prompt + max_tokens; engines that split their
    # context among requests size or check it by this).
    request_tokens: int = 0
    # What the caches may carry between runs, and the prompts they would carry
    # (workload.caches, workload.prompts): engines turn caches off or flush them by these.
    caches: CacheUse = CacheUse.none
    prompts: PromptReuse = PromptReuse.fixed

    def requested(self) -> dict[str, str]:
        """The settings whose engagement is checked on the live server."""
        return {
            "attention_backend": self.attention_backend.name,
            "allreduce_backend": self.allreduce_backend.name,
            "speculative": self.speculative.method,
        }


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

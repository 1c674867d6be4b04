"""Request traces: when production's requests arrived and how long they were, replayed.

A trace is a file of requests, each with its arrival time, its prompt's length and its
output's length in tokens, in one of three formats:

- ``mooncake``: Mooncake's JSONL (FAST'25 traces): ``{"timestamp": ms, "input_length",
  "output_length", "hash_ids": [...]}`` - each hash id names one 512-token block of the
  prompt, so requests that share a hash id share that block (a prefix cache serves it);
- ``azure``: Azure's LLM inference CSV (AzurePublicDataset 2023/2024): ``TIMESTAMP`` (a date
  and time), ``ContextTokens``, ``GeneratedTokens``;
- ``specexp``: a run's own ``requests.jsonl`` (its measured requests; warm-ups left out):
  when each was sent, its prompt tokens and the tokens it returned.

``auto`` tells the format from the file's first line. A replay takes a window of the trace
(``start_s``, ``duration_s`` in the trace's own seconds, at most ``limit`` requests), moves
its first arrival to 0, and divides its times by ``speedup``; lengths beyond a cap are cut to
it and counted. Pure but for reading the file; the shipped samples live in ``trace_samples/``.
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

# The samples shipped with specexp, by name (``mooncake-sample`` and the like).
_SHIPPED = Path(__file__).with_name("trace_samples")
_SHIPPED_FILES = {
    "mooncake-sample": "mooncake-sample.jsonl",
    "azure-sample": "azure-sample.csv",
    "specexp-sample": "specexp-sample.jsonl",
}
# Mooncake's prompt block: tokens per hash id.
MOONCAKE_BLOCK_TOKENS = 512


class TraceFormat(StrEnum):
    auto = "auto"
    mooncake = "mooncake"
    azure = "azure"
    specexp = "specexp"


class TraceError(ValueError):
    pass


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: when it arrived (seconds), its prompt's and its output's
    length (tokens), and the prompt's blocks (Mooncake's hash ids; empty: all its own)."""

    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def resolve_trace(source: str) -> Path:
    """A shipped sample's path by its name, else ``source`` as a path."""
    return _SHIPPED / _SHIPPED_FILES[source] if source in _SHIPPED_FILES else Path(source)


@lru_cache(maxsize=8)
def load_trace(
    source: str, trace_format: TraceFormat = TraceFormat.auto
) -> tuple[TraceRequest, ...]:
    """Every request of the trace, in order of arrival (times as the file gives them)."""
    path = resolve_trace(source)
    if not path.is_file():
        shipped = ", ".join(_SHIPPED_FILES)
        raise TraceError(f"trace {source!r}: no such file (shipped samples: {shipped})")
    with open(path, newline="") as handle:
        first = handle.readline()
        handle.seek(0)
        found = _detect(path, first) if trace_format == TraceFormat.auto else trace_format
        requests = list(
            _azure(path, handle) if found == TraceFormat.azure else _jsonl(path, handle, found)
        )
    if not requests:
        raise TraceError(f"trace {path}: no requests")
    return tuple(sorted(requests, key=lambda r: r.arrival_s))


def _detect(path: Path, first: str) -> TraceFormat:
    if first.lstrip().startswith("{"):
        record = json.loads(first)
        return TraceFormat.mooncake if "timestamp" in record else TraceFormat.specexp
    if "TIMESTAMP" in first and "ContextTokens" in first:
        return TraceFormat.azure
    raise TraceError(
        f"trace {path}: the first line is neither Mooncake's or specexp's JSONL nor Azure's "
        "CSV header (TIMESTAMP,ContextTokens,GeneratedTokens); set workload.trace.format"
    )


def _jsonl(path: Path, handle: Any, found: TraceFormat) -> Iterator[TraceRequest]:
    for number, line in enumerate(handle, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if found == TraceFormat.mooncake:
                yield TraceRequest(
                    record["timestamp"] / 1000,
                    int(record["input_length"]),
                    int(record["output_length"]),
                    tuple(int(h) for h in record.get("hash_ids", ())),
                )
            elif not record.get("warmup", False) and record.get("ok", True):
                yield TraceRequest(
                    float(record["start_unix"]),
                    int(record["prompt_tokens"]),
                    int(record["output_tokens"]),
                )
        except (KeyError, TypeError, ValueError) as exc:
            expected = (
                "timestamp, input_length, output_length"
                if found == TraceFormat.mooncake
                else "start_unix, prompt_tokens, output_tokens (a requests.jsonl line)"
            )
            raise TraceError(
                f"trace {path}, line {number}: {type(exc).__name__} {exc}; a {found} line "
                f"has {expected}"
            ) from None


def _azure(path: Path, handle: Any) -> Iterator[TraceRequest]:
    for number, row in enumerate(csv.DictReader(handle), 2):
        try:
            stamp = row["TIMESTAMP"].strip()
            # Azure writes seven fractional digits; datetime reads six.
            whole, _, fraction = stamp.partition(".")
            when = datetime.fromisoformat(f"{whole}.{(fraction + '000000')[:6]}")
            yield TraceRequest(
                when.timestamp(), int(row["ContextTokens"]), int(row["GeneratedTokens"])
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(
                f"trace {path}, line {number}: {type(exc).__name__} {exc}; an azure row has "
                "TIMESTAMP, ContextTokens, GeneratedTokens"
            ) from None


@dataclass(frozen=True)
class Replay:
    """The requests a replay sends: arrival times from 0, lengths cut to the caps, and how
    many were cut."""

    requests: tuple[TraceRequest, ...]
    inputs_cut: int = 0
    outputs_cut: int = 0

    @property
    def offsets(self) -> list[float]:
        return [r.arrival_s for r in self.requests]

    @property
    def rate(self) -> Optional[float]:
        """Arrivals per second over the replay's span (gaps over their sum)."""
        times = self.offsets
        if len(times) < 2 or times[-1] <= times[0]:
            return None
        return (len(times) - 1) / (times[-1] - times[0])


def replay(
    requests: tuple[TraceRequest, ...],
    speedup: float = 1.0,
    start_s: float = 0.0,
    duration_s: Optional[float] = None,
    limit: Optional[int] = None,
    max_input_tokens: Optional[int] = None,
    max_output_tokens: Optional[int] = None,
) -> Replay:
    """The window [start_s, start_s + duration_s) of the trace (seconds from its first
    arrival, in its own time), at most ``limit`` requests, its times from 0 divided by
    ``speedup``; lengths above a cap cut to it (at least one token each)."""
    origin = requests[0].arrival_s + start_s
    end = origin + duration_s if duration_s is not None else float("inf")
    window = [r for r in requests if origin <= r.arrival_s < end][:limit]
    if not window:
        raise TraceError(
            f"the trace has no request in its window [{start_s}, "
            f"{start_s + duration_s if duration_s is not None else 'end'}) s"
        )
    first = window[0].arrival_s
    cap_in, cap_out = max_input_tokens or 10**12, max_output_tokens or 10**12
    return Replay(
        tuple(
            TraceRequest(
                (r.arrival_s - first) / speedup,
                max(1, min(r.input_tokens, cap_in)),
                max(1, min(r.output_tokens, cap_out)),
                r.hash_ids[: -(-min(r.input_tokens, cap_in) // MOONCAKE_BLOCK_TOKENS)],
            )
            for r in window
        ),
        sum(r.input_tokens > cap_in for r in window),
        sum(r.output_tokens > cap_out for r in window),
    )


@dataclass(frozen=True)
class TraceStats:
    """What a replay sends, in figures recorded with the run: its requests, span and rate;
    the gaps' coefficient of variation (1 for Poisson arrivals, above: bursts); prompt and
    output lengths (mean, p50, p99); lengths cut to the caps; the share of prompt blocks
    that an earlier request of the replay already sent (Mooncake's hash ids: what a prefix
    cache could serve)."""

    requests: int
    span_s: float
    rate: float
    gap_cv: float
    input_mean: float
    input_p50: float
    input_p99: float
    output_mean: float
    output_p50: float
    output_p99: float
    inputs_cut: int
    outputs_cut: int
    shared_blocks: float

    def as_dict(self) -> dict[str, float]:
        return {f"trace_{k}": float(v) for k, v in self.__dict__.items()}


def trace_stats(sent: Replay) -> TraceStats:
    times = np.array(sent.offsets, dtype=float)
    gaps = np.diff(times)
    inputs = np.array([r.input_tokens for r in sent.requests], dtype=float)
    outputs = np.array([r.output_tokens for r in sent.requests], dtype=float)
    blocks = [h for r in sent.requests for h in r.hash_ids]
    return TraceStats(
        requests=len(times),
        span_s=float(times[-1] - times[0]),
        rate=sent.rate or 0.0,
        gap_cv=float(gaps.std() / gaps.mean()) if gaps.size and gaps.mean() > 0 else 0.0,
        input_mean=float(inputs.mean()),
        input_p50=float(np.percentile(inputs, 50)),
        input_p99=float(np.percentile(inputs, 99)),
        output_mean=float(outputs.mean()),
        output_p50=float(np.percentile(outputs, 50)),
        output_p99=float(np.percentile(outputs, 99)),
        inputs_cut=sent.inputs_cut,
        outputs_cut=sent.outputs_cut,
        shared_blocks=1 - len(set(blocks)) / len(blocks) if blocks else 0.0,
    )


def synthesise_prompt(
    request: TraceRequest, index: int, corpus: list[int], seed: int, namespace: str = ""
) -> list[int]:
    """A prompt of exactly ``request.input_tokens`` token ids cut from ``corpus`` (the
    server's tokens of a real prompt set): block by block, each 512-token block from where
    its hash id (or, without hash ids, the request's own index) and ``namespace`` (the run)
    seed it, so that requests the trace says share a block send the same tokens there, and
    no others do."""
    keys: list[str] = [f"h{h}" for h in request.hash_ids] or [f"r{index}"]
    prompt: list[int] = []
    block = 0
    while len(prompt) < request.input_tokens:
        key = keys[block] if block < len(keys) else f"{keys[-1]}+{block}"
        start = random.Random(f"{seed}/{namespace}/{key}").randrange(len(corpus))
        take = min(MOONCAKE_BLOCK_TOKENS, request.input_tokens - len(prompt))
        repeats = -(-(start + take) // len(corpus))
        prompt.extend((corpus * repeats)[start : start + take])
        block += 1
    return prompt

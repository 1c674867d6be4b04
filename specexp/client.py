"""Streaming load client (aiohttp): timings per request, token counts from the server.

Stream events are not tokens (speculation sends several tokens per event; random models emit
empty text), so output token counts come from what the server reports. Inter-token latency
is the gap between events divided by the tokens each event carried, when the server says.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

import aiohttp

from specexp.engines.base import Engine, parse_prometheus


# Seeded prompt prefixes draw from these words (any words would do; these are readable).
_WORDS = ("system latency token draft verify batch cache kernel memory stream tensor parallel "
          "request server model decode prefill accept reject queue engine throughput").split()


class StallError(RuntimeError):
    pass


@dataclass
class RequestRecord:
    """One streamed completion as measured by the client."""

    run: int
    stream: int
    warmup: bool
    start_unix: float
    launch: int = 0
    index: int = 0  # request number within its stream
    ok: bool = False
    error: Optional[str] = None
    ttft_s: Optional[float] = None
    e2e_s: Optional[float] = None
    output_tokens: Optional[int] = None
    prompt_tokens: Optional[int] = None
    events: int = 0
    # Per-token inter-token latencies (seconds), from event gaps and tokens per event.
    itl_s: list[float] = field(default_factory=list)
    # Speculative figures the server reported for this request.
    speculative: dict[str, Any] = field(default_factory=dict)

    @property
    def tok_per_s(self) -> Optional[float]:
        if self.ok and self.output_tokens and self.e2e_s:
            return self.output_tokens / self.e2e_s
        return None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "tok_per_s": self.tok_per_s}


@dataclass
class RunResult:
    """One measured (or warm-up) run: ``streams`` concurrent requests."""

    run: int
    warmup: bool
    wall_s: float
    records: list[RequestRecord]
    launch: int = 0
    # Deltas of the engine's cumulative speculative counters over the run.
    counter_deltas: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.records)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens or 0 for r in self.records)

    @property
    def tok_per_s(self) -> float:
        """Aggregate output tokens per second (single stream: that request's tok/s)."""
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def request_tok_per_s(self) -> Optional[float]:
        """Mean tok/s a single request saw (what one user experiences at this load)."""
        values = [r.tok_per_s for r in self.records if r.tok_per_s]
        return sum(values) / len(values) if values else None

    @property
    def acceptance_length(self) -> Optional[float]:
        """Mean tokens per target verification: 1 + accepted / drafts, from counter deltas."""
        drafts = self.counter_deltas.get("drafts")
        if drafts:
            return 1.0 + self.counter_deltas.get("accepted_tokens", 0.0) / drafts
        return None

    @property
    def acceptance_rate(self) -> Optional[float]:
        proposed = self.counter_deltas.get("draft_tokens")
        if proposed:
            return self.counter_deltas.get("accepted_tokens", 0.0) / proposed
        return None


class LoadClient:
    def __init__(self, engine: Engine, base_url: str, cfg: Any):
        self.engine = engine
        self.base_url = base_url
        self.cfg = cfg

    async def _stream_one(self, session: aiohttp.ClientSession, record: RequestRecord) -> None:
        stall = self.cfg.workload.stall_timeout_s
        start = time.perf_counter()
        last_event_at, last_count = start, 0
        try:
            path, body = self.engine.completion_request(self.cfg, self.prompt(record))
            # sock_read bounds each read: a stream that goes quiet is a stall, however long it ran.
            timeout = aiohttp.ClientTimeout(total=None, sock_read=stall)
            async with session.post(self.base_url + path, json=body, timeout=timeout) as response:
                if response.status != 200:
                    text = (await response.text())[:500]
                    raise RuntimeError(f"HTTP {response.status}: {text}")
                lines = aiter(response.content)
                while True:
                    try:
                        line = await anext(lines)
                    except StopAsyncIteration:
                        break
                    except asyncio.TimeoutError:
                        raise StallError(f"no data for {stall:.0f} s (workload.stall_timeout_s); stream ended") from None
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        break
                    now = time.perf_counter()
                    chunk = self.engine.parse_event(json.loads(payload))
                    record.events += 1
                    produced = chunk.tokens_in_chunk
                    if produced is None and chunk.tokens_so_far is not None:
                        produced = chunk.tokens_so_far - last_count
                        last_count = chunk.tokens_so_far
                    if produced and record.ttft_s is None:
                        record.ttft_s = now - start
                    elif produced:
                        record.itl_s.extend([(now - last_event_at) / produced] * produced)
                    elif produced is None and not chunk.done:
                        # The engine gives no per-event counts: time events instead.
                        if record.ttft_s is None:
                            record.ttft_s = now - start
                        else:
                            record.itl_s.append(now - last_event_at)
                    if produced or produced is None:
                        last_event_at = now
                    if chunk.done:
                        record.output_tokens = chunk.final.get("completion_tokens")
                        record.prompt_tokens = chunk.final.get("prompt_tokens")
                        record.speculative = {k: v for k, v in chunk.final.items() if k.startswith("spec_")}
                record.e2e_s = time.perf_counter() - start
                if record.output_tokens is None:
                    raise RuntimeError("stream ended without the server's final token count")
                record.ok = True
        except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, ValueError) as exc:
            record.e2e_s = time.perf_counter() - start
            record.error = f"{type(exc).__name__}: {exc}"

    def prompt(self, record: RequestRecord) -> str:
        """The workload's prompt, behind a seeded prefix of its own when prompts vary."""
        workload = self.cfg.workload
        if not workload.vary_prompt:
            return workload.prompt
        rng = random.Random(f"{workload.seed}/{record.launch}/{record.run}/{record.warmup}/{record.stream}/{record.index}")
        return " ".join(rng.choices(_WORDS, k=12)) + ". " + workload.prompt

    async def _counters(self, session: aiohttp.ClientSession) -> dict[str, float]:
        if not self.engine.speculative_counters or not self.engine.metrics_path:
            return {}
        try:
            timeout = aiohttp.ClientTimeout(total=self.cfg.workload.stall_timeout_s)
            async with session.get(self.base_url + self.engine.metrics_path, timeout=timeout) as response:
                values = parse_prometheus(await response.text())
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return {}
        return {ours: values[theirs] for ours, theirs in self.engine.speculative_counters.items() if theirs in values}

    async def run(self, run: int, warmup: bool, session: aiohttp.ClientSession,
                  on_record: Callable[[RequestRecord], None], launch: int = 0) -> RunResult:
        level = self.cfg.concurrency
        before = await self._counters(session)
        records: list[RequestRecord] = []
        started = time.perf_counter()
        deadline = started + level.duration_s if level.duration_s else None

        async def stream(index: int) -> None:
            for k in range(10**9 if deadline else level.requests_per_stream):
                if deadline and time.perf_counter() >= deadline:
                    break
                record = RequestRecord(run=run, stream=index, warmup=warmup, start_unix=time.time(),
                                       launch=launch, index=k)
                records.append(record)
                await self._stream_one(session, record)
                on_record(record)
                if not record.ok:
                    break

        await asyncio.gather(*(stream(i) for i in range(level.streams)))
        wall = time.perf_counter() - started
        after = await self._counters(session)
        deltas = {k: after[k] - before.get(k, 0.0) for k in after}
        return RunResult(run=run, warmup=warmup, wall_s=wall, records=records, counter_deltas=deltas, launch=launch)


def session(timeout_s: Optional[float] = None) -> aiohttp.ClientSession:
    """A session without total timeout (a 2048-token request is long); stalls are per read."""
    connector = aiohttp.TCPConnector(limit=0)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s))

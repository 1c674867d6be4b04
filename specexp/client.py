"""Streaming load client (aiohttp): timings per request, token counts from the server.

Stream events are not tokens (speculation sends several tokens per event; random models emit
empty text), so output token counts come from what the server reports. Inter-token latency
is the gap between events divided by the tokens each event carried, when the server says.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Callable, Optional

import aiohttp

from specexp.engines.base import Engine, parse_prometheus
from specexp.measurements import RequestRecord, RunResult
from specexp.schemas import ConcurrencyConfig, ServerSettings, WorkloadConfig


# Seeded prompt prefixes draw from these words (any words would do; these are readable).
class TruncatedError(RuntimeError):
    """A request returned fewer tokens than it had to."""


class StallError(RuntimeError):
    pass


class StreamTimer:
    """Reads one completion's server-sent events into its record: tokens as the server counts
    them, time to the first token, and inter-token latencies. Pure: the caller supplies each
    line with the time it arrived."""

    def __init__(
        self,
        engine: Engine,
        record: RequestRecord,
        start: float,
        expected_tokens: Optional[int] = None,
    ):
        """``expected_tokens``: the tokens the request must return (max_tokens when EOS is
        ignored); fewer means the server cut it short."""
        self.engine, self.record, self.start = engine, record, start
        self.expected_tokens = expected_tokens
        self.last_event_at, self.last_count = start, 0

    def line(self, raw: bytes, now: float) -> bool:
        """Take one line of the stream; True when the stream says it is done."""
        raw = raw.strip()
        if not raw.startswith(b"data:"):
            return False
        payload = raw[5:].strip()
        if payload == b"[DONE]":
            return True
        record = self.record
        chunk = self.engine.parse_event(json.loads(payload))
        record.events += 1
        produced = chunk.tokens_in_chunk
        if produced is None and chunk.tokens_so_far is not None:
            produced = chunk.tokens_so_far - self.last_count
            self.last_count = chunk.tokens_so_far
        gap = now - self.last_event_at
        if produced and record.ttft_s is None:
            record.ttft_s = now - self.start
        elif produced:
            record.itl_s.extend([gap / produced] * produced)
            record.chunk_gaps_s.append(gap)
        elif produced is None and not chunk.done:
            # The engine gives no per-event counts: time events instead.
            if record.ttft_s is None:
                record.ttft_s = now - self.start
            else:
                record.itl_s.append(gap)
                record.chunk_gaps_s.append(gap)
        if produced or produced is None:
            self.last_event_at = now
        if chunk.done:
            record.output_tokens = chunk.final.get("completion_tokens")
            record.prompt_tokens = chunk.final.get("prompt_tokens")
            record.speculative = {k: v for k, v in chunk.final.items() if k.startswith("spec_")}
        return False

    def finish(self, now: float) -> None:
        """The stream has ended: the request is complete if the server gave its token count."""
        record = self.record
        record.e2e_s = now - self.start
        if record.output_tokens is None:
            raise RuntimeError("stream ended without the server's final token count")
        if self.expected_tokens is not None and record.output_tokens < self.expected_tokens:
            record.truncated = True
            raise TruncatedError(
                f"truncated: {record.output_tokens} of {self.expected_tokens} tokens with EOS "
                "ignored (the server cut the request short: its context per request, or a "
                "length limit)"
            )
        record.ok = True


class LoadClient:
    """Sends one run's requests to a ready server and times every streamed event."""

    def __init__(
        self,
        engine: Engine,
        base_url: str,
        server: ServerSettings,
        workload: WorkloadConfig,
        concurrency: ConcurrencyConfig,
    ):
        self.engine = engine
        self.base_url = base_url
        self.server, self.workload, self.concurrency = server, workload, concurrency

    async def _stream_one(self, session: aiohttp.ClientSession, record: RequestRecord) -> None:
        workload = self.workload
        stall = workload.stall_timeout_s
        start = time.perf_counter()
        expected = workload.max_tokens if workload.ignore_eos else None
        timer = StreamTimer(self.engine, record, start, expected)
        try:
            path, body = self.engine.completion_request(self.server, workload, self.prompt(record))
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
                    except TimeoutError:
                        raise StallError(
                            f"no data for {stall:.0f} s (workload.stall_timeout_s); stream ended"
                        ) from None
                    if timer.line(line, time.perf_counter()):
                        break
                timer.finish(time.perf_counter())
        except (TimeoutError, aiohttp.ClientError, RuntimeError, ValueError) as exc:
            record.e2e_s = time.perf_counter() - start
            record.error = f"{type(exc).__name__}: {exc}"

    def prompt(self, record: RequestRecord) -> str:
        return self.workload.prompt_for(
            f"{record.launch}/{record.run}/{record.warmup}/{record.stream}/{record.index}"
        )

    async def _counters(self, session: aiohttp.ClientSession) -> dict[str, float]:
        if not self.engine.speculative_counters or not self.engine.metrics_path:
            return {}
        try:
            timeout = aiohttp.ClientTimeout(total=self.workload.stall_timeout_s)
            async with session.get(
                self.base_url + self.engine.metrics_path, timeout=timeout
            ) as response:
                values = parse_prometheus(await response.text())
        except (TimeoutError, aiohttp.ClientError):
            return {}
        return {
            ours: values[theirs]
            for ours, theirs in self.engine.speculative_counters.items()
            if theirs in values
        }

    async def run(
        self,
        run: int,
        warmup: bool,
        session: aiohttp.ClientSession,
        on_record: Callable[[RequestRecord], None],
        launch: int = 0,
    ) -> RunResult:
        level = self.concurrency
        before = await self._counters(session)
        records: list[RequestRecord] = []
        started_unix, started = time.time(), time.perf_counter()
        deadline = started + level.duration_s if level.duration_s else None

        async def stream(index: int) -> None:
            for k in range(10**9 if deadline else level.requests_per_stream):
                if deadline and time.perf_counter() >= deadline:
                    break
                record = RequestRecord(
                    run=run,
                    stream=index,
                    warmup=warmup,
                    start_unix=time.time(),
                    launch=launch,
                    index=k,
                )
                records.append(record)
                await self._stream_one(session, record)
                on_record(record)
                if not record.ok:
                    break

        await asyncio.gather(*(stream(i) for i in range(level.streams)))
        wall = time.perf_counter() - started
        after = await self._counters(session)
        deltas = {k: after[k] - before.get(k, 0.0) for k in after}
        return RunResult(
            run=run,
            warmup=warmup,
            wall_s=wall,
            records=records,
            counter_deltas=deltas,
            launch=launch,
            started_unix=started_unix,
        )


def session(
    timeout_s: Optional[float] = None, headers: Optional[dict[str, str]] = None
) -> aiohttp.ClientSession:
    """A session without total timeout (a 2048-token request is long); stalls are per read."""
    connector = aiohttp.TCPConnector(limit=0)
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s), headers=headers
    )

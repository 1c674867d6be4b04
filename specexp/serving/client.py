"""Streaming load client (aiohttp): one run's requests sent to a ready server - closed loop
(streams, each request after the one before) or open loop (arrivals when due) - in this
process or shared out to worker processes; timings per request, the server's counters as
deltas over the run."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import multiprocessing.pool
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import aiohttp
import orjson

from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.schemas.concurrency import ConcurrencyConfig, requests_per_stream
from specexp.core.schemas.engine import ServerSettings
from specexp.core.schemas.workload import PREFIX_WORDS, CacheUse, PromptReuse, WorkloadConfig
from specexp.core.traces import synthesise_prompt
from specexp.engines.http import is_local
from specexp.engines.prometheus import parse_prometheus
from specexp.engines.records import Prompt, ServerLoad
from specexp.serving.event_loop import run_async
from specexp.serving.pacing import IdleWait, arrival_offsets, stream_shares, wait_until_idle
from specexp.serving.stream import StallError, StreamingEngine, StreamTimer, session


class LoadClient:
    """Sends one run's requests to a ready server and times every streamed event."""

    def __init__(
        self,
        engine: StreamingEngine,
        base_url: str,
        server: ServerSettings[Any],
        workload: WorkloadConfig,
        concurrency: ConcurrencyConfig,
        headers: Optional[dict[str, str]] = None,
        prompt_namespace: str = "",
        idle_timeout_s: float = 30.0,
    ):
        """``prompt_namespace`` names the job in every prompt key, so that fresh prompts of
        jobs sharing one server differ; ``idle_timeout_s``: how long a run waits for the
        server to be idle before it starts anyway, flagged."""
        self.engine = engine
        self.base_url = base_url
        self.server, self.workload, self.concurrency = server, workload, concurrency
        self.headers = headers or {}
        self.prompt_namespace, self.idle_timeout_s = prompt_namespace, idle_timeout_s
        # The server's tokens of the prompt and of the prefix words (workload.prompt_tokens).
        self._token_sources: Optional[tuple[list[int], list[int]]] = None
        # A replayed trace (workload.trace): its requests, and the server's tokens of the
        # prompt set's text that their prompts are cut from.
        self._trace = workload.trace.replay() if workload.trace else None
        self._corpus: Optional[list[int]] = None
        self._sized: dict[tuple[int, int], WorkloadConfig] = {}
        # Worker processes, when the streams are shared out (concurrency.client_processes).
        self._pool: Optional[multiprocessing.pool.Pool] = None
        # Told of each request as it ends (live progress), in this process only.
        self.on_request: Optional[Callable[[RequestRecord], None]] = None
        # The server let a request or a probe wait workload.stall_timeout_s in this run: it
        # is silent (stopped, hung), and nothing more of the run waits on it, so that it is
        # named one stall timeout after it went quiet, not one per request or probe after.
        # What first waited that long, as the requests not sent after it say.
        self._silence: Optional[str] = None

    def __getstate__(self) -> dict[str, Any]:
        # A worker gets the client, not the pool nor the listener (this process's console).
        return {**self.__dict__, "_pool": None, "on_request": None}

    def session(self) -> aiohttp.ClientSession:
        return session(headers=self.headers, trust_env=not is_local(self.base_url))

    def close(self) -> None:
        """End the worker processes, if any."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    async def _stream_one(
        self, session: aiohttp.ClientSession, record: RequestRecord, due: Optional[float] = None
    ) -> None:
        """Send one request and time its stream: from ``due`` (a perf_counter time) when it
        was due by an open-loop schedule, so that a late send counts against it, else from now."""
        workload = self._request_workload(record)
        stall = workload.stall_timeout_s
        if self._silence:
            record.error = f"{self._silence}; not sent, the server having gone silent in this run"
            record.stalled, record.e2e_s = True, 0.0
            if self.on_request is not None:
                self.on_request(record)
            return
        start = time.perf_counter()
        if due is not None:
            record.send_lag_s, start = start - due, due
        expected = workload.max_tokens if workload.ignore_eos else None
        timer = StreamTimer(self.engine, record, start, expected, workload.prompt_tokens)
        try:
            path, body = self.engine.completion_request(self.server, workload, self.prompt(record))
            if due is None:
                # A stream's fields (llama.cpp: its slot). An open-loop arrival has no stream:
                # pinned by its number, it would wait for that slot while others were free.
                body.update(self.engine.stream_fields(self.server, record.stream))
            # sock_read bounds each read: a stream that goes quiet is a stall, however long it ran.
            timeout = aiohttp.ClientTimeout(total=None, sock_read=stall)
            try:
                response = await session.post(self.base_url + path, json=body, timeout=timeout)
            except TimeoutError:
                raise StallError(
                    f"no response headers for {stall:.0f} s (workload.stall_timeout_s)"
                ) from None
            async with response:
                if response.status != 200:
                    text = (await response.text())[:500]
                    raise RuntimeError(f"HTTP {response.status}: {text}")
                await self._read_events(response, timer)
                timer.finish(time.perf_counter())
        except (TimeoutError, aiohttp.ClientError, RuntimeError, ValueError) as exc:
            record.e2e_s = time.perf_counter() - start
            record.error = f"{type(exc).__name__}: {exc}"
            record.stalled = isinstance(exc, TimeoutError)  # a stall, or no answer in time
            if record.stalled and not self._silence:
                self._silence = record.error
        if self.on_request is not None:
            self.on_request(record)

    async def _read_events(self, response: aiohttp.ClientResponse, timer: StreamTimer) -> None:
        """Feed the stream to the timer: whatever bytes one read returns, split into lines
        stamped with that read's time (events that arrived together are stamped together)."""
        pending = b""
        try:
            async for data in response.content.iter_any():
                now = time.perf_counter()
                *lines, pending = (pending + data).split(b"\n")
                if timer.arrival(lines, now):
                    return
        except TimeoutError:
            stall = self.workload.stall_timeout_s
            raise StallError(
                f"no data for {stall:.0f} s (workload.stall_timeout_s); stream ended"
            ) from None
        if pending:
            timer.arrival([pending], time.perf_counter())

    def _request_workload(self, record: RequestRecord) -> WorkloadConfig:
        """The workload, or in a trace's replay one sized as its request: the trace's prompt
        and output lengths (an arrival's record is its trace request's, by index)."""
        if self._trace is None:
            return self.workload
        request = self._trace.requests[record.stream]
        key = (request.input_tokens, request.output_tokens)
        if key not in self._sized:
            self._sized[key] = dataclasses.replace(
                self.workload,
                trace=None,
                dataset=None,
                prompt="trace",
                prompt_tokens=request.input_tokens,
                max_tokens=request.output_tokens,
            )
        return self._sized[key]

    def prompt(self, record: RequestRecord) -> Prompt:
        """The request's prompt: in a trace's replay its length of the prompt set's text;
        the prompt set's next (noting which on the record), or the workload's one prompt
        (fresh: behind a prefix of its own)."""
        if self._trace is not None:
            if self._corpus is None:
                raise RuntimeError("a trace's prompts are cut from the server's tokens: none yet")
            return synthesise_prompt(
                self._trace.requests[record.stream],
                record.stream,
                self._corpus,
                self.workload.seed,
                f"{self.prompt_namespace}/{record.launch}/{record.run}/{record.warmup}",
            )
        dataset = self.workload.dataset_prompts()
        if dataset:
            chosen = dataset[
                (record.index * self.concurrency.streams + record.stream) % len(dataset)
            ]
            record.prompt_id, record.category = chosen.id, chosen.category
            return chosen.text
        key = (
            f"{self.prompt_namespace}/{record.launch}/{record.run}/{record.warmup}/"
            f"{record.stream}/{record.index}"
        )
        if self._token_sources is None:
            return self.workload.prompt_for(key)
        return self.workload.prompt_ids_for(key, *self._token_sources)

    async def _tokenize(self, session: aiohttp.ClientSession, text: str) -> list[int]:
        path, body = self.engine.tokenize_request(self.server, text)
        timeout = aiohttp.ClientTimeout(total=self.workload.stall_timeout_s)
        async with session.post(self.base_url + path, json=body, timeout=timeout) as response:
            if response.status != 200:
                raise RuntimeError(
                    f"workload.prompt_tokens needs the server's tokenizer: {path} answered "
                    f"HTTP {response.status}: {(await response.text())[:300]}"
                )
            tokens = (await response.json())["tokens"]
        if not tokens:
            raise RuntimeError(f"the server's tokenizer made no tokens of {text[:80]!r}")
        return [int(t) for t in tokens]

    async def _prepare_prompts(self, session: aiohttp.ClientSession) -> None:
        """Ask the server for its tokens once, before anything is timed."""
        if self._trace is not None and self._corpus is None:
            texts = [p.text for p in self.workload.dataset_prompts()]
            self._corpus = [t for text in texts for t in await self._tokenize(session, text)]
        if self.workload.prompt_tokens is None or self._token_sources is not None:
            return
        words = await self._tokenize(session, " " + " ".join(PREFIX_WORDS))
        self._token_sources = (await self._tokenize(session, self.workload.prompt), words)

    async def _get(self, session: aiohttp.ClientSession, path: Optional[str]) -> Optional[str]:
        """The body of GET ``path``, or None (no such endpoint, no answer, a silent server)."""
        if not path or self._silence:
            return None
        try:
            timeout = aiohttp.ClientTimeout(total=self.workload.stall_timeout_s)
            async with session.get(self.base_url + path, timeout=timeout) as response:
                return await response.text() if response.status == 200 else None
        except TimeoutError:
            stall = self.workload.stall_timeout_s
            self._silence = (
                f"StallError: no answer to {path} for {stall:.0f} s (workload.stall_timeout_s)"
            )
            return None
        except aiohttp.ClientError:
            return None

    async def _counters(self, session: aiohttp.ClientSession) -> dict[str, float]:
        """The server's speculative and accounting series, by metric name."""
        wanted = {**self.engine.speculative_counters, **self.engine.accounting_counters}
        text = await self._get(session, self.engine.metrics_path) if wanted else None
        values = parse_prometheus(text) if text else {}
        return {name: values[name] for name in wanted.values() if name in values}

    async def _state(self, session: aiohttp.ClientSession) -> tuple[Optional[ServerLoad], Any]:
        """The server's load, and the answer of its state endpoint (llama.cpp's /slots)."""
        metrics_text = await self._get(session, self.engine.metrics_path)
        state_text = await self._get(session, self.engine.state_path)
        try:
            state = orjson.loads(state_text) if state_text else None
        except orjson.JSONDecodeError:
            state = None
        metrics = parse_prometheus(metrics_text) if metrics_text else {}
        return self.engine.server_load(metrics, state), state

    async def _settle(self, session: aiohttp.ClientSession) -> IdleWait:
        """Wait until the server is idle; then, when no cache may carry work between runs and
        prompts are fresh, empty its caches and put its slot order back (and wait for that
        work too)."""

        async def probe() -> Optional[ServerLoad]:
            return (await self._state(session))[0]

        waited = await wait_until_idle(probe, self.idle_timeout_s)
        if self.server.caches != CacheUse.none or self.server.prompts != PromptReuse.fresh:
            return waited
        state = (await self._state(session))[1]
        flushes = self.engine.cache_flush(self.server, state)
        reorders = self.engine.slot_order(self.server, state)
        if self._silence:  # the requests will say so, at once
            return waited
        for method, path in flushes:
            await self._reset(session, method, path, None, "emptying the server's caches")
        # One after another: the server hands out slots in the order they were released.
        for path, body in reorders:
            await self._reset(session, "POST", path, body, "putting the server's slots in order")
        sent = len(flushes) + len(reorders)
        if not sent:
            return waited
        again = await wait_until_idle(probe, self.idle_timeout_s)
        return IdleWait(waited.waited_s + again.waited_s, again.load, sent)

    async def _reset(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path: str,
        body: Optional[dict[str, Any]],
        purpose: str,
    ) -> None:
        """One request of the settling before a run, answered in full, or the run fails."""
        timeout = aiohttp.ClientTimeout(total=self.workload.stall_timeout_s)
        async with session.request(
            method, self.base_url + path, json=body, timeout=timeout
        ) as response:
            text = await response.text()
            if response.status != 200:
                raise RuntimeError(
                    f"{purpose} before the run: {method} {path} answered "
                    f"HTTP {response.status}: {text[:300]}"
                )

    async def run(
        self,
        run: int,
        warmup: bool,
        session: aiohttp.ClientSession,
        launch: int = 0,
        rate: Optional[float] = None,
        decided: Optional[Callable[[Sequence[RequestRecord]], bool]] = None,
    ) -> RunResult:
        """One run: every stream's requests (open loop: every arrival's), from one start; the
        server's counters as deltas. ``rate``: an open-loop run's arrival rate, when not
        ``concurrency.rate`` (a capacity search's); ``decided``: told the arrivals sent so
        far before each next one, it ends the run's sending when it says so (a capacity
        search's run whose attainment is decided; one client process only)."""
        level = self.concurrency
        if self._trace is not None:
            rate = self._trace.rate
        rate = rate if rate is not None else level.rate
        self._silence = None
        await self._prepare_prompts(session)
        settled = await self._settle(session)
        before = await self._counters(session)
        units = level.arrivals if level.open_loop else level.streams
        if self._trace is not None:
            units = len(self._trace.requests)
        shares = stream_shares(units, level.processes())
        started_unix = time.time()
        if len(shares) == 1:
            started = time.perf_counter()
            records, finished = await self._share(
                session, shares[0], run, warmup, launch, started, rate, decided
            )
        else:
            records, started, finished = await asyncio.get_running_loop().run_in_executor(
                None, self._run_in_workers, shares, run, warmup, launch, rate
            )
            started_unix += started - time.perf_counter()
        after = await self._counters(session)
        return RunResult(
            run=run,
            warmup=warmup,
            wall_s=finished - started,
            records=sorted(records, key=lambda r: (r.stream, r.index)),
            counter_deltas=_deltas(self.engine.speculative_counters, before, after),
            accounting_deltas=_deltas(self.engine.accounting_counters, before, after),
            launch=launch,
            started_unix=started_unix,
            idle_wait_s=settled.waited_s,
            busy_at_start=settled.load.describe() if settled.load and not settled.idle else None,
            caches_flushed=settled.flushed,
            asked_rate=rate if level.open_loop else None,
        )

    async def _share(
        self,
        session: aiohttp.ClientSession,
        share: Sequence[int],
        run: int,
        warmup: bool,
        launch: int,
        started: float,
        rate: Optional[float],
        decided: Optional[Callable[[Sequence[RequestRecord]], bool]] = None,
    ) -> tuple[list[RequestRecord], float]:
        """This process's streams, or with open-loop arrivals its arrivals."""
        if not self.concurrency.open_loop:
            return await self._streams(session, share, run, warmup, launch, started)
        if self._trace is not None:
            due = self._trace.offsets
        elif rate is None:
            raise ValueError("an open-loop run needs an arrival rate")
        else:
            due = arrival_offsets(self.concurrency, rate, launch, run, warmup)
        return await self._arrivals(
            session, [(k, due[k]) for k in share], run, warmup, launch, started, decided
        )

    async def _arrivals(
        self,
        session: aiohttp.ClientSession,
        due: Sequence[tuple[int, float]],
        run: int,
        warmup: bool,
        launch: int,
        started: float,
        decided: Optional[Callable[[Sequence[RequestRecord]], bool]] = None,
    ) -> tuple[list[RequestRecord], float]:
        """Send each arrival when it is due (``started`` plus its offset) whatever the ones
        before it are doing: none waits for another (no coordinated omission). Sending ends
        early once ``decided`` says so; the requests in flight finish."""
        records: list[RequestRecord] = []
        in_flight: list[asyncio.Task[None]] = []
        for arrival, offset in due:
            await asyncio.sleep(max(0.0, started + offset - time.perf_counter()))
            if decided is not None and decided(records):
                break
            record = _begin(records, run, warmup, launch, arrival, due_s=offset)
            in_flight.append(
                asyncio.create_task(self._stream_one(session, record, started + offset))
            )
        await asyncio.gather(*in_flight)
        return records, time.perf_counter()

    async def _streams(
        self,
        session: aiohttp.ClientSession,
        streams: Sequence[int],
        run: int,
        warmup: bool,
        launch: int,
        started: float,
    ) -> tuple[list[RequestRecord], float]:
        """Run ``streams`` from ``started`` (a perf_counter time); their records, and when the
        last one ended."""
        level = self.concurrency
        deadline = started + level.duration_s if level.duration_s else None
        records: list[RequestRecord] = []

        async def stream(index: int) -> None:
            for k in range(10**9 if deadline else requests_per_stream(self.workload, level, index)):
                if deadline and time.perf_counter() >= deadline:
                    break
                record = _begin(records, run, warmup, launch, index, index=k)
                await self._stream_one(session, record)
                if not record.ok:
                    break

        await asyncio.sleep(max(0.0, started - time.perf_counter()))
        await asyncio.gather(*(stream(i) for i in streams))
        return records, time.perf_counter()

    def _run_in_workers(
        self, shares: list[list[int]], run: int, warmup: bool, launch: int, rate: Optional[float]
    ) -> tuple[list[RequestRecord], float, float]:
        """Each share of the streams in a worker process of its own, all from one start."""
        if self._pool is None:
            # Spawned, not forked: the parent may hold threads (tracking, progress).
            self._pool = multiprocessing.get_context("spawn").Pool(len(shares))
            self._pool.map(_worker_ready, range(len(shares)))  # imports done before timing
        # perf_counter is the system's monotonic clock: one time base for every process.
        started = time.perf_counter() + _WORKER_START_S
        parts = self._pool.starmap(
            _worker_streams,
            [(self, share, run, warmup, launch, started, rate) for share in shares],
        )
        records = [record for share_records, _ in parts for record in share_records]
        return records, started, max(finished for _, finished in parts)


def _begin(
    records: list[RequestRecord],
    run: int,
    warmup: bool,
    launch: int,
    stream: int,
    index: int = 0,
    due_s: Optional[float] = None,
) -> RequestRecord:
    """A request's record, started now and kept in ``records``."""
    record = RequestRecord(
        run=run,
        stream=stream,
        warmup=warmup,
        start_unix=time.time(),
        launch=launch,
        index=index,
        due_s=due_s,
    )
    records.append(record)
    return record


_WORKER_START_S = 0.2


def _worker_ready(_: int) -> None:
    """A worker has imported this module once it runs this."""


def _worker_streams(
    client: LoadClient,
    share: list[int],
    run: int,
    warmup: bool,
    launch: int,
    started: float,
    rate: Optional[float],
) -> tuple[list[RequestRecord], float]:
    async def go() -> tuple[list[RequestRecord], float]:
        async with client.session() as http:
            return await client._share(http, share, run, warmup, launch, started, rate)

    return run_async(go())


def _deltas(
    names: Mapping[str, str], before: Mapping[str, float], after: Mapping[str, float]
) -> dict[str, float]:
    """{our name: the series' change over a run} for the series the server exposed."""
    return {
        ours: after[theirs] - before.get(theirs, 0.0)
        for ours, theirs in names.items()
        if theirs in after
    }

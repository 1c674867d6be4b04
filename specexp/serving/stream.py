"""One completion's stream: what the client needs of an engine, the HTTP session, and the
timer that reads the server-sent events into the request's record.

Stream events are not tokens (speculation sends several tokens per event; random models emit
empty text), so output token counts come from what the server reports. Inter-token latency
is the gap between events divided by the tokens each event carried, when the server says.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Protocol

import aiohttp
import orjson

from specexp.core.measurements import RequestRecord
from specexp.core.schemas.engine import ServerSettings
from specexp.core.schemas.workload import WorkloadConfig
from specexp.engines.records import Prompt, ServerLoad, StreamChunk


class StreamingEngine(Protocol):
    """What the client needs of an engine, and all of it: how to ask for a completion and
    read its stream, and where the server keeps its counters and its state. The client owns
    this interface; every engine plugin satisfies it."""

    @property
    def metrics_path(self) -> Optional[str]: ...
    @property
    def state_path(self) -> Optional[str]: ...
    @property
    def speculative_counters(self) -> Mapping[str, str]: ...
    @property
    def accounting_counters(self) -> Mapping[str, str]: ...

    def completion_request(
        self, server: ServerSettings[Any], workload: WorkloadConfig, prompt: Prompt
    ) -> tuple[str, dict[str, Any]]: ...
    def tokenize_request(
        self, server: ServerSettings[Any], text: str
    ) -> tuple[str, dict[str, Any]]: ...
    def stream_fields(self, server: ServerSettings[Any], stream: int) -> dict[str, Any]: ...
    def parse_event(self, event: dict[str, Any]) -> StreamChunk: ...
    def server_load(self, metrics: Mapping[str, float], state: Any) -> Optional[ServerLoad]: ...
    def cache_flush(self, server: ServerSettings[Any], state: Any) -> list[tuple[str, str]]: ...
    def slot_order(
        self, server: ServerSettings[Any], state: Any
    ) -> list[tuple[str, dict[str, Any]]]: ...


class TruncatedError(RuntimeError):
    """A request returned fewer tokens than it had to."""


class StallError(TimeoutError):
    """No data for workload.stall_timeout_s."""


class StreamTimer:
    """Reads one completion's server-sent events into its record: tokens as the server counts
    them, time to the first token, and inter-token latencies. Pure: the caller supplies each
    line with the time it arrived."""

    def __init__(
        self,
        engine: StreamingEngine,
        record: RequestRecord,
        start: float,
        expected_tokens: Optional[int] = None,
        prompt_tokens: Optional[int] = None,
    ):
        """``expected_tokens``: the tokens the request must return (max_tokens when EOS is
        ignored); fewer means the server cut it short. ``prompt_tokens``: the prompt's length
        in token ids sent, which the server must count."""
        self.engine, self.record, self.start = engine, record, start
        self.expected_tokens, self.prompt_tokens = expected_tokens, prompt_tokens
        self.last_event_at, self.last_count = start, 0
        self.text: list[str] = []

    def arrival(self, lines: Iterable[bytes], now: float) -> bool:
        """Take the lines one read returned, all arrived at ``now``; True when the stream says
        it is done. Events that arrive together are one arrival: their tokens share its gap
        (how they were spaced before the client could see them is not knowable here)."""
        tokens = carriers = 0
        for raw in lines:
            raw = raw.strip()
            if not raw.startswith(b"data:"):
                continue
            payload = raw[5:].strip()
            if payload == b"[DONE]":
                self._time(tokens, now, carriers)
                return True
            event = orjson.loads(payload)
            try:
                if not isinstance(event, dict):
                    raise TypeError(type(event).__name__)
                carried = self._event(event)
            except (AttributeError, TypeError, KeyError, IndexError):
                # Valid JSON of a shape the engine does not send: the record says so.
                raise ValueError(f"unexpected event from the server: {payload[:200]!r}") from None
            tokens += carried
            carriers += carried > 0
        self._time(tokens, now, carriers)
        return False

    def _event(self, event: dict[str, Any]) -> int:
        """Record one event; the tokens it carried."""
        record = self.record
        chunk = self.engine.parse_event(event)
        record.events += 1
        if chunk.text_so_far is not None:
            self.text = [chunk.text_so_far]
        elif chunk.text:
            self.text.append(chunk.text)  # joined once, at the end: nothing copied per event
        if chunk.final.get("finish"):
            record.finish = chunk.final["finish"]
        if chunk.done:
            record.output_tokens = chunk.final.get("completion_tokens")
            record.prompt_tokens = chunk.final.get("prompt_tokens")
            record.prompt_cached_tokens = chunk.final.get("cached_tokens")
            record.speculative = {k: v for k, v in chunk.final.items() if k.startswith("spec_")}
        if chunk.tokens_in_chunk is not None:
            return chunk.tokens_in_chunk
        if chunk.tokens_so_far is not None:
            produced = chunk.tokens_so_far - self.last_count
            self.last_count = chunk.tokens_so_far
            return produced
        # The engine gives no per-event counts: time events instead.
        return 0 if chunk.done else 1

    def _time(self, tokens: int, now: float, carriers: int = 1) -> None:
        if not tokens:
            return
        record = self.record
        record.events_read_together += max(0, carriers - 1)
        if record.ttft_s is None:
            record.ttft_s = now - self.start
        else:
            gap = now - self.last_event_at
            record.chunk_gaps_s.append(gap)
            if tokens == 1:
                record.itl_s.append(gap)
            else:
                record.itl_s.extend([gap / tokens] * tokens)
        self.last_event_at = now

    def finish(self, now: float) -> None:
        """The stream has ended: the request is complete if the server gave its token count."""
        record = self.record
        record.e2e_s = now - self.start
        record.output_text = "".join(self.text)
        if record.output_tokens is None:
            raise RuntimeError("stream ended without the server's final token count")
        if self.prompt_tokens is not None and record.prompt_tokens != self.prompt_tokens:
            raise RuntimeError(
                f"the server counted {record.prompt_tokens} prompt tokens where "
                f"{self.prompt_tokens} token ids were sent (workload.prompt_tokens)"
            )
        if self.expected_tokens is not None and record.output_tokens < self.expected_tokens:
            record.truncated = True
            raise TruncatedError(
                f"truncated: {record.output_tokens} of {self.expected_tokens} tokens with EOS "
                "ignored (the server cut the request short: its context per request, or a "
                "length limit)"
            )
        record.ok = True


def session(
    timeout_s: Optional[float] = None,
    headers: Optional[dict[str, str]] = None,
    trust_env: bool = False,
) -> aiohttp.ClientSession:
    """A session without total timeout (a 2048-token request is long); stalls are per read.
    ``trust_env``: through $HTTP_PROXY and the like (for a server specexp did not start)."""
    # A connection per request: llama-server fails a request sent on a connection its
    # previous stream left open (back-to-back requests of one stream), and a localhost
    # connect costs a fraction of a millisecond, the same in every arm.
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        headers=headers,
        trust_env=trust_env,
    )

"""What the load client measures, as plain data: one record per request, one result per run.

Written by the client, read by engines (what engaged), the runner and the statistics; the
per-request records are also the lines of ``requests.jsonl``, and whole runs are kept in the
lines of ``launches.jsonl``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from specexp.core.notes import Note
from specexp.core.records import History, Record, Version


@dataclass
class RequestRecord(Record):
    """One streamed completion as measured by the client: a line of ``requests.jsonl``,
    with its derived rates for readers of the file."""

    HISTORY = History(
        "request",
        (
            Version(
                1,
                "the request as measured; the prompt set's prompt_id, category, output_text and "
                "finish, the open loop's due_s and send_lag_s, stalled and events_read_together "
                "came later within format 1",
                (
                    "prompt_id",
                    "category",
                    "output_text",
                    "finish",
                    "due_s",
                    "send_lag_s",
                    "stalled",
                    "events_read_together",
                ),
            ),
        ),
    )
    DERIVED = ("tok_per_s", "decode_tok_per_s")

    run: int
    stream: int
    warmup: bool
    start_unix: float
    launch: int = 0
    index: int = 0  # request number within its stream
    ok: bool = False
    error: Optional[str] = None
    # Fewer tokens than the request had to return (EOS ignored): kept, and not ok.
    truncated: bool = False
    # No data came for workload.stall_timeout_s: not ok. In an open-loop run a server that
    # queues more than it serves does this, and such a request has missed every SLO; in a
    # closed loop it is a fault.
    stalled: bool = False
    ttft_s: Optional[float] = None
    e2e_s: Optional[float] = None
    output_tokens: Optional[int] = None
    prompt_tokens: Optional[int] = None
    # Prompt tokens the server served from its prompt cache, where it says.
    prompt_cached_tokens: Optional[int] = None
    events: int = 0
    # Per-token inter-token latencies (seconds): each event's gap shared by its tokens (the
    # mean is exact; a stall that delivers several tokens is spread over them)...
    itl_s: list[float] = field(default_factory=list)
    # ...and the gaps between the events that carried tokens, after the first (AIPerf's
    # inter-chunk latency): the tail shows stalls whole.
    chunk_gaps_s: list[float] = field(default_factory=list)
    # Token-carrying events that arrived in one read with an earlier one: the server wrote
    # them together (a speculative step's tokens, on some engines), or the client read late
    # - then their true spacing is lost, and the ITL tail errs low (benchmarks/latency_tails.py).
    events_read_together: int = 0
    # Speculative figures the server reported for this request.
    speculative: dict[str, Any] = field(default_factory=dict)
    # The prompt set's prompt it sent, and its category (workload.dataset).
    prompt_id: Optional[str] = None
    category: Optional[str] = None
    # What it returned, as streamed, and why it stopped: "eos" (a natural end, complete),
    # "length" (max_tokens) or the engine's own word.
    output_text: str = ""
    finish: Optional[str] = None
    # Open loop: when the request was due (seconds after the run's start), and how late the
    # client sent it; its latencies count from when it was due (no coordinated omission).
    due_s: Optional[float] = None
    send_lag_s: Optional[float] = None

    @property
    def tok_per_s(self) -> Optional[float]:
        if self.ok and self.output_tokens and self.e2e_s:
            return self.output_tokens / self.e2e_s
        return None

    @property
    def decode_tok_per_s(self) -> Optional[float]:
        """tok/s without the TTFT: the tokens after the first over the time after it."""
        if self.ok and self.output_tokens and self.output_tokens > 1 and self.e2e_s:
            decoding = self.e2e_s - (self.ttft_s or 0.0)
            return (self.output_tokens - 1) / decoding if decoding > 0 else None
        return None


@dataclass
class RunResult(Record):
    """One measured (or warm-up) run: ``streams`` concurrent requests. Written whole in a
    line of ``launches.jsonl`` (a launch a resumed sweep takes back)."""

    HISTORY = History(
        "run",
        (Version(1, "the run as measured: its requests, counters, accounting and telemetry"),),
    )

    run: int
    warmup: bool
    wall_s: float
    records: list[RequestRecord]
    launch: int = 0
    # Deltas of the engine's cumulative speculative counters over the run...
    counter_deltas: dict[str, float] = field(default_factory=dict)
    # ...and of its own accounting of tokens and time (Engine.accounting_counters).
    accounting_deltas: dict[str, float] = field(default_factory=dict)
    started_unix: float = 0.0
    # The machine while the run went on (specexp.host.telemetry): metrics, and what to warn of.
    telemetry: dict[str, float] = field(default_factory=dict)
    machine_warnings: list[Note] = field(default_factory=list)
    # Before the run: how long the client waited for the server to be idle; what it was
    # still doing when the wait ran out (None: it was idle); requests that reset its state
    # (caches emptied, llama.cpp's slots released in order) sent.
    idle_wait_s: float = 0.0
    busy_at_start: Optional[str] = None
    caches_flushed: int = 0
    # Open loop: the arrival rate asked for (requests per second).
    asked_rate: Optional[float] = None

    @property
    def achieved_rate(self) -> Optional[float]:
        """Open loop: the rate the requests were sent at (between the first send and the
        last), beside :attr:`asked_rate`; a client that fell behind its schedule shows here."""
        sent = sorted(
            r.due_s + r.send_lag_s
            for r in self.records
            if r.due_s is not None and r.send_lag_s is not None
        )
        if len(sent) < 2 or sent[-1] <= sent[0]:
            return None
        return (len(sent) - 1) / (sent[-1] - sent[0])

    @property
    def offered_rate(self) -> Optional[float]:
        """Open loop: the rate the server was offered - the one the client sent at, else
        (fewer than two sends) the asked one. The capacity fit reads this: a client that
        fell behind offered less than was asked."""
        return self.achieved_rate or self.asked_rate

    @property
    def scheduled_rate(self) -> Optional[float]:
        """Open loop: the rate of the schedule itself (a Poisson schedule's own rate varies
        about the asked one from run to run)."""
        due = sorted(r.due_s for r in self.records if r.due_s is not None)
        if len(due) < 2 or due[-1] <= due[0]:
            return None
        return (len(due) - 1) / (due[-1] - due[0])

    @property
    def send_lag_s_max(self) -> Optional[float]:
        lags = [r.send_lag_s for r in self.records if r.send_lag_s is not None]
        return max(lags) if lags else None

    @property
    def midpoint_unix(self) -> float:
        """When the run happened, as one instant: the time axis of drift."""
        return self.started_unix + self.wall_s / 2

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.records)

    @property
    def faults(self) -> list[RequestRecord]:
        """Requests that failed for a reason other than an open-loop overload: any failed
        request in a closed loop; in an open loop, the failed ones that did not stall."""
        open_loop = self.asked_rate is not None
        return [r for r in self.records if not r.ok and not (open_loop and r.stalled)]

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
    def decode_tok_per_s(self) -> Optional[float]:
        """Mean per-request tok/s without the TTFT (decoding alone)."""
        values = [r.decode_tok_per_s for r in self.records if r.decode_tok_per_s]
        return sum(values) / len(values) if values else None

    def _mean(self, values: list[float]) -> Optional[float]:
        return sum(values) / len(values) if values else None

    @property
    def ttft_s_mean(self) -> Optional[float]:
        return self._mean([r.ttft_s for r in self.records if r.ok and r.ttft_s is not None])

    @property
    def tpot_s_mean(self) -> Optional[float]:
        """Mean per request of the time per output token after the first."""
        return self._mean([1 / r.decode_tok_per_s for r in self.records if r.decode_tok_per_s])

    @property
    def e2e_s_mean(self) -> Optional[float]:
        return self._mean([r.e2e_s for r in self.records if r.ok and r.e2e_s is not None])

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

"""A trace replayed against the fake server (tests/fake_server.py): each request sent at its
trace time, with its prompt's and output's lengths, latency counted from its due time."""

from __future__ import annotations

import pytest

from specexp.core.traces import load_trace, replay
from tests.process.test_client import fake_server, run_against

pytestmark = pytest.mark.process


def test_a_replayed_trace_sends_each_request_at_its_time_with_its_lengths():
    process, url = fake_server("--itl-ms", "2")
    try:
        result = run_against(
            url,
            "workload=trace",
            "concurrency=trace",
            "workload.trace.source=azure-sample",
            "workload.trace.limit=12",
            "workload.trace.speedup=1",
            "workload.trace.max_input_tokens=300",
            "workload.trace.max_output_tokens=20",
        )
    finally:
        process.kill()
        process.wait()
    sent = replay(load_trace("azure-sample"), 1.0, 0.0, None, 12, 300, 20)
    records = sorted(result.records, key=lambda r: r.stream)
    assert result.ok and len(records) == 12
    assert [r.due_s for r in records] == pytest.approx(sent.offsets)
    assert [r.prompt_tokens for r in records] == [q.input_tokens for q in sent.requests]
    assert [r.output_tokens for r in records] == [q.output_tokens for q in sent.requests]
    assert result.asked_rate == pytest.approx(sent.rate)
    # Latency from the due time: never less than the send lag it includes.
    assert all(r.e2e_s >= r.send_lag_s for r in records)

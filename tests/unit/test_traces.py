"""Request traces read in each format, windowed, scaled and cut; prompts synthesised to
their lengths; the replay's statistics. On the shipped samples (synthetic, written for
specexp: specexp/core/trace_samples/README.md) and files written here."""

from __future__ import annotations

import pytest

from specexp.core.schemas.checks import ConfigError
from specexp.core.traces import (
    MOONCAKE_BLOCK_TOKENS,
    TraceError,
    TraceFormat,
    TraceRequest,
    load_trace,
    replay,
    synthesise_prompt,
    trace_stats,
)
from tests.conftest import compose_job

pytestmark = pytest.mark.unit


def test_each_format_is_read_and_told_apart():
    mooncake = load_trace("mooncake-sample")
    assert len(mooncake) == 60
    # The file's first line: {"timestamp": 123, "input_length": 14192, "output_length": 38}.
    assert mooncake[0] == TraceRequest(0.123, 14192, 38, tuple(range(28)))
    azure = load_trace("azure-sample")
    assert len(azure) == 80
    # 18:15:46.0364963 then 18:15:46.4415741: seven fractional digits, read to the microsecond.
    assert (azure[0].input_tokens, azure[0].output_tokens) == (821, 73)
    assert azure[1].arrival_s - azure[0].arrival_s == pytest.approx(0.405078, abs=1e-6)
    own = load_trace("specexp-sample")
    assert len(own) == 40  # the measured run's; the warm-up's four are left out
    assert all(r.arrival_s == sorted(x.arrival_s for x in own)[k] for k, r in enumerate(own))


def test_a_file_not_in_a_trace_format_is_refused_with_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 9}\n')
    with pytest.raises(TraceError, match="line 2"):
        load_trace(str(bad))
    csv = tmp_path / "bad.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,2\n")
    with pytest.raises(TraceError, match="line 2"):
        load_trace(str(csv), TraceFormat.azure)
    other = tmp_path / "other.txt"
    other.write_text("time,prompt\n")
    with pytest.raises(TraceError, match="set workload.trace.format"):
        load_trace(str(other))
    with pytest.raises(TraceError, match="no such file"):
        load_trace(str(tmp_path / "absent.jsonl"))


def test_a_replay_windows_scales_and_cuts_the_trace():
    trace = (
        TraceRequest(100.0, 2000, 10, (1, 2, 3, 4)),
        TraceRequest(101.0, 600, 300, (1, 2)),
        TraceRequest(103.0, 50, 5),
        TraceRequest(110.0, 50, 5),
    )
    sent = replay(trace, speedup=2.0, start_s=1.0, duration_s=5.0, max_input_tokens=1000)
    # The window [101, 106) s: the second and third requests, from 0, twice as fast.
    assert sent.offsets == [0.0, 1.0]
    assert [r.input_tokens for r in sent.requests] == [600, 50]
    assert sent.rate == pytest.approx(1.0)
    whole = replay(trace, max_input_tokens=1000, max_output_tokens=100, limit=3)
    assert [r.input_tokens for r in whole.requests] == [1000, 600, 50]
    assert (whole.inputs_cut, whole.outputs_cut) == (1, 1)
    # A cut prompt keeps the blocks it still holds.
    assert whole.requests[0].hash_ids == (1, 2)
    with pytest.raises(TraceError, match="no request in its window"):
        replay(trace, start_s=20.0)


def test_a_replays_statistics_describe_what_it_sends():
    trace = tuple(
        TraceRequest(t, n, m, h)
        for t, n, m, h in [(0, 100, 10, (7,)), (1, 600, 30, (7, 8)), (3, 200, 20, (9,))]
    )
    stats = trace_stats(replay(trace))
    assert (stats.requests, stats.span_s, stats.rate) == (3, 3.0, pytest.approx(2 / 3))
    assert stats.gap_cv == pytest.approx(0.5 / 1.5)  # gaps 1 and 2
    assert (stats.input_mean, stats.output_p50) == (300.0, 20.0)
    assert stats.shared_blocks == pytest.approx(1 / 4)  # block 7 sent twice of four
    assert stats.as_dict()["trace_requests"] == 3.0


def test_prompts_are_cut_to_length_and_share_exactly_the_blocks_the_trace_shares():
    corpus = list(range(1000, 1700))
    first = TraceRequest(0.0, 1100, 5, (1, 2, 3))
    second = TraceRequest(1.0, 600, 5, (1, 4))
    a = synthesise_prompt(first, 0, corpus, seed=0, namespace="run0")
    b = synthesise_prompt(second, 1, corpus, seed=0, namespace="run0")
    assert (len(a), len(b)) == (1100, 600)
    assert set(a) <= set(corpus)
    block = MOONCAKE_BLOCK_TOKENS
    assert a[:block] == b[:block] and a[block : 2 * block] != b[block:]
    assert a == synthesise_prompt(first, 0, corpus, seed=0, namespace="run0")
    # Another run's prompts are its own (nothing of the last run is served from cache).
    assert a[:block] != synthesise_prompt(first, 0, corpus, seed=0, namespace="run1")[:block]
    # Without hash ids each request is its own.
    plain = [synthesise_prompt(TraceRequest(0.0, 40, 5), k, corpus, 0) for k in range(2)]
    assert plain[0] != plain[1]


def test_a_trace_is_configured_with_its_arrivals_and_a_prompt_set():
    job = compose_job("workload=trace", "concurrency=trace")
    trace = job.config.workload.trace
    assert trace is not None and trace.replay().requests
    # The largest request of the window sizes the server's context.
    assert job.config.workload.request_tokens_bound() <= 512 + 64 + 1
    with pytest.raises(ConfigError, match="together"):
        compose_job("workload=trace")
    with pytest.raises(ConfigError, match="leave concurrency.rate"):
        compose_job("workload=trace", "concurrency=trace", "concurrency.rate=2")
    with pytest.raises(ConfigError, match="set workload.dataset"):
        compose_job("workload=trace", "concurrency=trace", "workload.dataset=null")
    with pytest.raises(ConfigError, match="no request in its window"):
        compose_job("workload=trace", "concurrency=trace", "workload.trace.start_s=1e6")

"""Each engine's stream parsing, on recorded streams: real llama.cpp and vLLM streams (recorded
from their servers with the generated pair and a draft), and SGLang's as its server writes
it (composed from its code; SGLang cannot serve here). Events are replayed
10 ms apart, so every timing is known exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from specexp.core.measurements import RequestRecord
from specexp.engines import get_engine
from specexp.serving.stream import StreamTimer, TruncatedError

STREAMS = Path(__file__).parent / "streams"
GAP_S = 0.010


def replay(engine: str, name: str) -> RequestRecord:
    record = RequestRecord(run=0, stream=0, warmup=False, start_unix=0.0)
    timer = StreamTimer(get_engine(engine), record, start=0.0)
    events = 0
    for line in (STREAMS / name).read_bytes().splitlines():
        if line.startswith(b"data:"):
            events += 1
        if timer.arrival([line], events * GAP_S):
            break
    timer.finish(events * GAP_S)
    return record


def test_llamacpp_counts_tokens_per_event_and_reads_the_drafts():
    record = replay("llamacpp", "llamacpp_draft.sse")
    assert record.ok and record.output_tokens == 12 and record.prompt_tokens == 12
    assert record.events == 12  # 11 token events (one carries 2 tokens) and the final one
    assert record.ttft_s == pytest.approx(GAP_S)
    # One latency per token after the first; the two-token event splits its gap in two.
    assert len(record.itl_s) == 11
    assert sorted(record.itl_s)[:2] == pytest.approx([GAP_S / 2, GAP_S / 2])
    # One gap per token-carrying event after the first: the stall stays whole.
    assert record.chunk_gaps_s == pytest.approx([GAP_S] * 10)
    assert record.speculative == {"spec_draft_tokens": 9, "spec_accepted_tokens": 9}
    # Without the TTFT: 11 tokens after the first, over the 11 gaps after it.
    assert record.decode_tok_per_s == pytest.approx(11 / (record.e2e_s - GAP_S))


def test_sglang_counts_cumulative_tokens_and_reads_meta_info():
    record = replay("sglang", "sglang_eagle3.sse")
    assert record.ok and record.output_tokens == 10 and record.prompt_tokens == 6
    assert record.ttft_s == pytest.approx(GAP_S)
    assert record.itl_s == pytest.approx([GAP_S / 3] * 9)  # three tokens per verify step
    assert record.speculative == {
        "spec_verify_steps": 3,
        "spec_accept_length": pytest.approx(10 / 3),
        "spec_accepted_tokens": 6,
        "spec_draft_tokens": 9,
    }


def test_vllm_counts_tokens_per_event_from_its_continuous_usage():
    """A real vLLM stream with a draft model: events carry 1, 5, 5 and 1 tokens."""
    record = replay("vllm", "vllm_draft.sse")
    assert record.ok and record.output_tokens == 12 and record.prompt_tokens == 8
    assert record.ttft_s == pytest.approx(GAP_S)
    # One latency per token after the first: a five-token event shares its gap five ways.
    assert record.itl_s == pytest.approx([GAP_S / 5] * 10 + [GAP_S])
    assert record.chunk_gaps_s == pytest.approx([GAP_S] * 3)


def test_a_stream_without_the_final_count_is_not_a_finished_request():
    record = RequestRecord(run=0, stream=0, warmup=False, start_unix=0.0)
    timer = StreamTimer(get_engine("llamacpp"), record, start=0.0)
    first = (STREAMS / "llamacpp_draft.sse").read_bytes().splitlines()[0]
    timer.arrival([first], GAP_S)
    with pytest.raises(RuntimeError, match="without the server's final token count"):
        timer.finish(2 * GAP_S)
    assert not record.ok


def replay_without_finishing(**expected: int) -> tuple[RequestRecord, StreamTimer]:
    """The recorded llama.cpp stream (12 prompt and 12 output tokens), not yet finished."""
    record = RequestRecord(run=0, stream=0, warmup=False, start_unix=0.0)
    timer = StreamTimer(get_engine("llamacpp"), record, start=0.0, **expected)
    for events, line in enumerate((STREAMS / "llamacpp_draft.sse").read_bytes().splitlines()):
        timer.arrival([line], events * GAP_S)
    return record, timer


def test_a_request_cut_short_with_eos_ignored_is_kept_as_truncated():
    """12 tokens where 16 were due (EOS ignored): the record keeps every figure and says why
    it is not ok."""
    record, timer = replay_without_finishing(expected_tokens=16)
    with pytest.raises(TruncatedError, match="truncated: 12 of 16 tokens"):
        timer.finish(1.0)
    assert record.truncated and not record.ok
    assert record.output_tokens == 12 and len(record.itl_s) == 11 and record.e2e_s == 1.0


def test_a_stall_that_delivers_two_tokens_shows_whole_in_the_chunk_gaps():
    """Tokens at 10 ms, then a 20 ms stall that delivers two at once: the per-token ITL
    shares it out (two 10 ms gaps, as if nothing happened); the chunk gaps keep the 20 ms."""
    record = RequestRecord(run=0, stream=0, warmup=False, start_unix=0.0)
    timer = StreamTimer(get_engine("sglang"), record, start=0.0)
    for count, at in ((1, 0.010), (2, 0.020), (3, 0.030), (5, 0.050)):
        timer.arrival([b'data: {"text": "", "meta_info": {"completion_tokens": %d}}' % count], at)
    assert record.itl_s == pytest.approx([0.010, 0.010, 0.010, 0.010])
    assert record.chunk_gaps_s == pytest.approx([0.010, 0.010, 0.020])


def test_a_prompt_the_server_counts_differently_from_what_was_sent_fails_the_request():
    """13 token ids sent (workload.prompt_tokens), the server counts 12: the prompt was not
    the length asked for, and the request says so."""
    record, timer = replay_without_finishing(prompt_tokens=13)
    with pytest.raises(RuntimeError, match="counted 12 prompt tokens where 13 token ids"):
        timer.finish(1.0)
    assert not record.ok and record.prompt_tokens == 12


def test_events_that_arrive_in_one_read_share_its_gap():
    """Two one-token events in one read arrived together as far as the client can tell:
    one arrival whose gap their tokens share, never a zero latency."""
    record = RequestRecord(run=0, stream=0, warmup=False, start_unix=0.0)
    timer = StreamTimer(get_engine("sglang"), record, start=0.0)
    event = b'data: {"text": "", "meta_info": {"completion_tokens": %d}}'
    timer.arrival([event % 1], 0.010)
    timer.arrival([event % 2, b"", event % 3], 0.030)
    assert record.itl_s == pytest.approx([0.010, 0.010]) and min(record.itl_s) > 0
    assert record.chunk_gaps_s == pytest.approx([0.020]) and record.events == 3

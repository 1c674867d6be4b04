"""Acceptance per draft position on recorded counters: vLLM's Prometheus text as its own
metrics code writes it (recorded through vLLM 0.32's SpecDecodingProm and
prometheus_client, 1,000 drafts of four tokens), llama.cpp's per-position counter and
per-request timings, SGLang's per-request histogram; the identity AL = 1 + sum of marginal
rates, failing on corrupted records; specdec_bench's profile fields and conventions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specexp.analysis.acceptance import (
    IDENTITY_TOLERANCE,
    PositionCounts,
    check_pinned,
    per_request_length,
    profile,
)
from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.notes import NoteKind
from specexp.core.schemas.checks import ConfigError
from specexp.engines import get_engine
from specexp.engines.prometheus import parse_prometheus
from tests.conftest import compose_job

READINGS = Path(__file__).parent / "readings"
STREAMS = Path(__file__).parent / "streams"

# llama.cpp's /metrics with speculation configured: the per-position counter's lines as
# build 11434's server writes them (its HELP text and label, read from the binary).
LLAMACPP_BEFORE = """\
llamacpp:spec_decode_num_draft_tokens_total 40
llamacpp:spec_decode_num_accepted_tokens_total 20
llamacpp:spec_decode_num_drafts_total 10
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 9
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 3
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 2
"""
LLAMACPP_AFTER = """\
llamacpp:spec_decode_num_draft_tokens_total 440
llamacpp:spec_decode_num_accepted_tokens_total 250
llamacpp:spec_decode_num_drafts_total 110
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 89
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 66
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 53
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 42
"""


def deltas(engine: str, before: str, after: str) -> dict[str, float]:
    """The run's counter deltas as the client takes them: the engine's counters, parsed."""
    start, end = parse_prometheus(before), parse_prometheus(after)
    names = get_engine(engine).speculative_counters
    return {
        ours: end[theirs] - start.get(theirs, 0.0)
        for ours, theirs in names.items()
        if theirs in end
    }


def vllm_deltas() -> dict[str, float]:
    return deltas(
        "vllm",
        (READINGS / "vllm_spec_decode_metrics_before.txt").read_text(),
        (READINGS / "vllm_spec_decode_metrics_after.txt").read_text(),
    )


def run_of(counter_deltas: dict[str, float], run: int = 0, records=()) -> RunResult:
    return RunResult(
        run=run, warmup=False, wall_s=1.0, records=list(records), counter_deltas=counter_deltas
    )


def test_vllm_counters_give_marginal_and_conditional_rates_per_position():
    counted = vllm_deltas()
    # The labelled vector is read per position, beside the totals (its engine and model
    # labels summed away).
    assert counted == {
        "drafts": 1000.0,
        "draft_tokens": 4000.0,
        "accepted_tokens": 1793.0,
        "accepted_at_position_0": 698.0,
        "accepted_at_position_1": 488.0,
        "accepted_at_position_2": 353.0,
        "accepted_at_position_3": 254.0,
    }
    found = profile([run_of(counted)], positions=4, confidence=0.95)
    assert found is not None
    assert [r.value for r in found.marginal] == pytest.approx([0.698, 0.488, 0.353, 0.254])
    assert [r.value for r in found.conditional] == pytest.approx(
        [0.698, 488 / 698, 353 / 488, 254 / 353]
    )
    assert all(r.low < r.value < r.high for r in found.marginal + found.conditional)
    # The conditional's interval is of fewer trials than the marginal's at the same position.
    assert found.conditional[3].high - found.conditional[3].low > (
        found.marginal[3].high - found.marginal[3].low
    )
    assert found.acceptance_length == pytest.approx(2.793)
    assert found.identity.passed and found.identity.delta == pytest.approx(0.0)
    assert found.per_request is None  # vLLM says nothing per request
    assert not found.notes()


def test_a_corrupted_record_fails_the_identity_and_is_flagged():
    """One run's accepted total disagrees with its positions (a position's counts lost): that
    run is flagged by number, and the job's pooled counts fail too."""
    good = vllm_deltas()
    corrupted = {**good, "accepted_at_position_2": 0.0}
    found = profile([run_of(good, 0), run_of(corrupted, 1)], positions=4, confidence=0.95)
    assert found is not None
    assert [run for run, _ in found.failed_runs] == [1]
    (_, check) = found.failed_runs[0]
    assert check.implied == pytest.approx(2.793 - 0.353) and not check.passed
    assert not found.identity.passed
    notes = found.notes()
    assert [n.kind for n in notes] == [NoteKind.acceptance_identity] * 2
    assert "run 1" in notes[1].message
    assert found.to_json("draft")["validation"]["mean_consistency"]["passed"] is False


def test_a_draft_deeper_than_the_vector_fails_the_identity():
    """K understated (2 where the server drafted 4): the vector is cut short, the implied
    length falls below the counted one - specdec_bench's truncation case."""
    found = profile([run_of(vllm_deltas())], positions=2, confidence=0.95)
    assert found is not None and not found.identity.passed
    assert found.identity.implied < found.identity.reported - IDENTITY_TOLERANCE


def test_llamacpp_counters_and_timings():
    counted = deltas("llamacpp", LLAMACPP_BEFORE, LLAMACPP_AFTER)
    assert counted["drafts"] == 100 and counted["accepted_at_position_3"] == 40
    engine = get_engine("llamacpp")
    final = [
        line
        for line in (STREAMS / "llamacpp_draft.sse").read_text().splitlines()
        if '"timings"' in line and '"draft_n"' in line
    ][-1]
    chunk = engine.parse_event(json.loads(final.removeprefix("data: ")))
    record = RequestRecord(run=0, stream=0, warmup=False, start_unix=0.0, ok=True)
    record.output_tokens = chunk.final["completion_tokens"]
    record.speculative = {k: v for k, v in chunk.final.items() if k.startswith("spec_")}
    # 12 tokens, 9 of them accepted drafts: the 11 after the first took 11 - 9 target steps.
    assert per_request_length(record) == pytest.approx(11 / 2)
    found = profile([run_of(counted, records=[record])], positions=4, confidence=0.95)
    assert found is not None
    assert [r.value for r in found.marginal] == pytest.approx([0.8, 0.6, 0.5, 0.4])
    assert found.acceptance_length == pytest.approx(1 + 230 / 100)
    assert found.identity.passed
    assert found.per_request == pytest.approx(5.5) and found.requests == 1


def test_a_server_without_the_position_counter_gives_no_profile():
    """llama.cpp without speculation configured has only the totals (at zero)."""
    counted = deltas(
        "llamacpp",
        (READINGS / "llamacpp_metrics_idle.txt").read_text(),
        (READINGS / "llamacpp_metrics_busy.txt").read_text(),
    )
    assert profile([run_of(counted)], positions=4, confidence=0.95) is None


def test_sglang_histograms_per_request():
    """SGLang's meta_info histogram (steps that accepted exactly n drafts), summed over
    requests; its verification steps give the per-request length."""
    engine = get_engine("sglang")
    meta = {
        "finish_reason": {"type": "length", "length": 10},
        "completion_tokens": 10,
        "prompt_tokens": 6,
        "spec_verify_ct": 3,
        "spec_accept_token_num": 6,
        "spec_draft_token_num": 9,
        "spec_accept_histogram": [0, 1, 1, 1],
    }
    chunk = engine.parse_event({"text": "x", "meta_info": meta})
    record = RequestRecord(run=0, stream=0, warmup=False, start_unix=0.0, ok=True)
    record.output_tokens = 10
    record.speculative = {k: v for k, v in chunk.final.items() if k.startswith("spec_")}
    assert record.speculative["spec_accept_histogram"] == [0, 1, 1, 1]
    found = profile([run_of({}, records=[record, record])], positions=3, confidence=0.95)
    assert found is not None and found.source == "each request's acceptance histogram"
    assert found.counts.drafts == 6 and found.counts.accepted == 12
    assert [r.value for r in found.marginal] == pytest.approx([1.0, 2 / 3, 1 / 3])
    assert found.identity.passed
    assert found.per_request == pytest.approx(9 / 3)


def test_specdec_bench_conventions():
    """specdec_bench's own worked case: 100 steps emitting 1, 2 and 3 tokens 40, 30 and 30
    times. Length keys count the target's token (length = position + 2 for a position's
    marginal); the vector is padded to K."""
    counts = PositionCounts.from_histogram([40, 30, 30])
    assert counts is not None
    found = profile(
        [run_of({"drafts": 100, "accepted_tokens": 90, **_positions(counts)})],
        positions=3,
        confidence=0.95,
    )
    assert found is not None
    data = found.to_json("eagle3", "/models/org/target", "/models/org/head")
    assert data["schema_version"] == "1.0"
    assert data["marginal_accept_rates"] == pytest.approx([0.6, 0.3, 0.0])
    assert data["conditional_accept_rates"] == pytest.approx([0.6, 0.5, 0.0])
    assert data["mean_accept_length"] == pytest.approx(1.9)
    assert data["acceptance_length_histogram"] == {"1": 40, "2": 30, "3": 30, "4": 0}
    assert data["accept_length_model"] == "chain_analytic"
    assert data["target_model"] == {"id": "org/target"}
    assert data["validation"]["mean_consistency"]["passed"]
    assert data["validation"]["marginal_monotonicity"]["passed"]
    assert set(data) >= {
        "measured",
        "method",
        "draft_checkpoint",
        "num_speculative_tokens",
        "block_size",
        "max_supported_k",
        "verification_method",
        "mean_accept_length_per_request",
        "accept_length_by_k",
        "per_category",
        "measurement_conditions",
    }


def _positions(counts: PositionCounts) -> dict[str, float]:
    return {f"accepted_at_position_{i}": v for i, v in enumerate(counts.accepted_at)}


def test_a_pinned_length_against_the_realised_one_off_by_ones_included():
    """A synthetic arm pinned at AL 2.5 with four draft tokens: vLLM's minimum-variance
    schedule accepts the first draft always and the second half the time (marginals 1, 0.5,
    0, 0). Counts as pinned agree; counts of an engine that took 2.5 as drafts accepted
    (TensorRT-LLM's convention: AL 3.5) do not, on the length and position by position."""
    pinned, rates = 2.5, [1.0, 0.5, 0.0, 0.0]
    as_pinned = PositionCounts(1000, 1000 + 489, (1000, 489, 0, 0))
    check = check_pinned(as_pinned, 4, pinned, 0.95, rates)
    assert check.agrees, check.describe()
    assert check.low < 2.5 < check.high
    shifted = PositionCounts(1000, 2000 + 489, (1000, 1000, 489, 0))
    off = check_pinned(shifted, 4, pinned, 0.95, rates)
    assert not off.agrees and off.positions_off == (1, 2)
    assert off.realised == pytest.approx(3.489)
    # An integer length is deterministic: every draft accepts exactly two tokens. One that
    # accepted one is inside the length's interval, but not at its position.
    whole = [1.0, 1.0, 0.0, 0.0]
    assert check_pinned(PositionCounts(50, 100, (50, 50, 0, 0)), 4, 3.0, 0.95, whole).agrees
    short = check_pinned(PositionCounts(50, 99, (50, 49, 0, 0)), 4, 3.0, 0.95, whole)
    assert short.low < 3.0 < short.high and short.positions_off == (1,)


def test_a_synthetic_arm_is_composed_where_the_engine_has_the_knob():
    """SGLang takes the pinned length in its environment; vLLM in its speculative config
    (checked by vLLM's own parser in tests/process/test_vllm_commands.py); llama.cpp has no
    such setting, and says so; a length outside 1 .. K + 1 is no length at all."""
    sglang = compose_job(
        "engine=sglang",
        "model=kimi-k2.5",
        "stack=cu130",
        "speculative=eagle3",
        "model.eagle3_draft_path=org/head",
        "speculative.synthetic_acceptance_length=3.2",
    )
    env = sglang.command.at(30000).env
    assert env["SGLANG_SIMULATE_ACC_LEN"] == "3.2"
    assert env["SGLANG_SIMULATE_ACC_METHOD"] == "match-expected"
    vllm = compose_job(
        "engine=vllm", "speculative=ngram", "speculative.synthetic_acceptance_length=2.5"
    )
    argv = vllm.command.at(8000).argv
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config["rejection_sample_method"] == "synthetic"
    assert config["synthetic_acceptance_length"] == 2.5
    assert vllm.engine.pinned_marginals(2.5, 4) == [1.0, 0.5, 0.0, 0.0]
    # The live server's resolution (/server_info) clears the length into its rates: kept
    # when the rates are the length's schedule, changed when they are not.
    launch = vllm.command.at(8000)
    resolved = {
        "max_num_seqs": int(argv[argv.index("--max-num-seqs") + 1]),
        **{f"speculative_config.{k}": v for k, v in config.items()},
        "speculative_config.synthetic_acceptance_length": None,
        "speculative_config.synthetic_acceptance_rates": [1.0, 0.5, 0.0, 0.0],
    }
    assert vllm.engine.rewrites(launch, resolved)[0] == []
    resolved["speculative_config.synthetic_acceptance_rates"] = [1.0, 1.0, 0.5, 0.0]
    assert vllm.engine.rewrites(launch, resolved)[0] == [
        "speculative_config.synthetic_acceptance_length 2.5 -> None"
    ]
    assert vllm.engine.pinned_marginals(5.0, 4) == [1.0] * 4
    with pytest.raises(ConfigError, match="not supported by vLLM's CPU build"):
        compose_job(
            "engine=vllm",
            "stack=vllm-cpu",
            "speculative=ngram",
            "speculative.synthetic_acceptance_length=2.5",
        )
    with pytest.raises(ConfigError, match="engine=llamacpp: it has no setting that pins"):
        compose_job("speculative=draft", "speculative.synthetic_acceptance_length=2.5")
    with pytest.raises(ConfigError, match="from 1 to num_draft_tokens \\+ 1 = 5"):
        compose_job(
            "engine=vllm", "speculative=ngram", "speculative.synthetic_acceptance_length=5.5"
        )
    with pytest.raises(ConfigError, match="speculative=none drafts nothing"):
        compose_job("engine=vllm", "speculative.synthetic_acceptance_length=2")

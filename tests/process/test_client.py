"""The load client against a real llama.cpp server: token counts and timings."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from specexp.analysis import acceptance
from specexp.host.job import Job
from specexp.host.leases import free_port
from specexp.serving.client import LoadClient
from specexp.serving.event_loop import run_async
from specexp.serving.server import ServerProcess
from specexp.serving.stream import session
from tests.conftest import QUICK, REPO, compose_job, llamacpp_launch


def client_for(job: Job, url: str) -> LoadClient:
    cfg = job.config
    return LoadClient(job.engine, url, job.server, cfg.workload, cfg.concurrency)


def measure(tmp_path, *overrides):
    (measured,) = measure_on_one_server(tmp_path, overrides)
    return measured


def measure_on_one_server(tmp_path, *variants):
    """Two runs of each variant's overrides, one variant after the other, on the one server
    they all compose: (config, runs, records) for each."""
    jobs = [compose_job(*QUICK, *overrides) for overrides in variants]
    assert len({job.server_fingerprint() for job in jobs}) == 1
    launch, port = llamacpp_launch(*variants[0])
    with ServerProcess(launch, "127.0.0.1", port, "/health", tmp_path / "server.log") as server:
        server.wait_ready(60)
        measured = []
        for job in jobs:
            client = client_for(job, server.base_url)

            async def go(client: LoadClient):
                async with session() as http:
                    return [await client.run(i, False, http) for i in range(2)]

            runs = run_async(go(client))
            measured.append((job.config, runs, [record for run in runs for record in run.records]))
        return measured


def test_single_stream_records_server_token_counts_and_timings(tmp_path):
    cfg, runs, records = measure(tmp_path)
    assert len(records) == 2 and all(r.ok for r in records)
    for record in records:
        assert record.output_tokens == cfg.workload.max_tokens == 256
        assert 0 < record.ttft_s < record.e2e_s
        # One ITL per token after the first arrival (events read together share their
        # arrival's gap), each positive. On a loaded machine the first read may carry several
        # events: their tokens have no gap, and are counted as read together.
        first_read = record.output_tokens - len(record.itl_s)
        assert 1 <= first_read <= 1 + record.events_read_together
        assert sum(record.itl_s) <= record.e2e_s - record.ttft_s
        assert min(record.itl_s) > 0
        assert abs(record.tok_per_s - record.output_tokens / record.e2e_s) < 1e-9
    assert runs[0].tok_per_s > 0
    assert runs[0].acceptance_length is None  # no speculation, no drafts


def test_speculative_counters_are_deltas_per_run(tmp_path):
    cfg, runs, records = measure(tmp_path, "speculative=draft")
    for run in runs:
        # The padded pair agrees on (nearly) every token; batch numerics flip a few near-ties.
        assert run.counter_deltas["drafts"] > 0
        assert run.acceptance_rate > 0.5
        assert run.acceptance_length > 2
    # Deltas, not the cumulative totals: both runs drafted about the same amount.
    assert (
        abs(runs[0].counter_deltas["draft_tokens"] - runs[1].counter_deltas["draft_tokens"]) <= 16
    )
    assert (
        0
        < records[0].speculative["spec_accepted_tokens"]
        <= records[0].speculative["spec_draft_tokens"]
    )
    # Per draft position too: each run's counts satisfy AL = 1 + sum of marginal rates.
    found = acceptance.profile(runs, cfg.speculative.num_draft_tokens, 0.95)
    assert found is not None and found.identity.passed and not found.failed_runs
    assert found.marginal[0].value > 0.5 and found.per_request is not None


def test_concurrent_streams_each_get_their_tokens(tmp_path):
    cfg, runs, records = measure(tmp_path, "concurrency.streams=3", "workload.max_tokens=64")
    assert len(records) == 6 and all(r.output_tokens == 64 for r in records)
    assert runs[0].output_tokens == 3 * 64


def test_a_prompt_in_tokens_reaches_the_server_exactly_and_its_cache_as_asked(tmp_path):
    # One server (the prompts are the client's): the fresh prompts after the fixed one.
    (_, _, fixed), (_, _, fresh) = measure_on_one_server(
        tmp_path,
        ("workload.prompt_tokens=100", "workload.max_tokens=8"),
        ("workload.prompt_tokens=100", "workload.prompts=fresh", "workload.max_tokens=8"),
    )
    assert all(r.ok and r.prompt_tokens == 100 for r in fixed)
    assert fixed[1].prompt_cached_tokens >= 99  # the second request found its prompt cached
    assert all(r.ok and r.prompt_tokens == 100 for r in fresh)
    assert fresh[1].prompt_cached_tokens < 12  # no more than a chance match in its prefix


def fake_server(*args):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_server", "--port", str(port), *args], cwd=REPO
    )
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("fake server did not start")


def run_against(url, *overrides):
    client = client_for(compose_job(*QUICK, *overrides), url)

    async def go():
        async with session() as http:
            return await client.run(0, False, http)

    return run_async(go())


@pytest.mark.no_engine_server
def test_streams_shared_over_client_processes_come_back_as_one_run():
    """Eight streams over two worker processes: every stream's requests, in stream order,
    timed from one start; the workers end with the client."""
    process, url = fake_server("--itl-ms", "2")
    job = compose_job(
        *QUICK,
        "concurrency.streams=8",
        "concurrency.requests_per_stream=2",
        "concurrency.client_processes=2",
        "workload.max_tokens=50",
    )
    client = client_for(job, url)
    try:

        async def go():
            async with session() as http:
                return await client.run(0, False, http)

        result = run_async(go())
        workers = [p for p in psutil.Process().children() if "spawn_main" in " ".join(p.cmdline())]
    finally:
        client.close()
        process.kill()
        process.wait()
    assert result.ok and [(r.stream, r.index) for r in result.records] == [
        (s, k) for s in range(8) for k in range(2)
    ]
    assert result.output_tokens == 8 * 2 * 50
    # Two requests of 50 tokens at 2 ms each, back to back: the wall time is one stream's.
    assert 0.2 < result.wall_s < 10
    assert len(workers) == 2 and not any(w.is_running() for w in workers)


@pytest.mark.no_engine_server
def test_a_stalled_stream_is_ended_by_the_stall_timeout_and_says_so():
    process, url = fake_server("--stall-after", "5")
    try:
        result = run_against(url, "workload.max_tokens=20", "workload.stall_timeout_s=1")
    finally:
        process.kill()
        process.wait()
    (record,) = result.records
    assert not record.ok and record.error.startswith("StallError: no data for 1 s")
    assert 1 <= record.e2e_s < 10


@pytest.mark.no_engine_server
def test_an_event_of_a_shape_no_engine_sends_fails_the_request_and_keeps_its_record():
    """Valid JSON that is not an event object (issue 45: AttributeError, the run lost)."""
    process, url = fake_server("--event", "[1, 2, 3]")
    try:
        result = run_against(url, "workload.max_tokens=5")
    finally:
        process.kill()
        process.wait()
    (record,) = result.records
    assert not record.ok
    assert record.error == "ValueError: unexpected event from the server: b'[1, 2, 3]'"


@pytest.mark.no_engine_server
def test_a_server_that_never_sends_headers_is_a_stall_naming_its_setting():
    """Issue 45: a SocketTimeoutError after 132 s, naming no setting."""
    process, url = fake_server("--no-headers")
    try:
        result = run_against(url, "workload.max_tokens=5", "workload.stall_timeout_s=1")
    finally:
        process.kill()
        process.wait()
    (record,) = result.records
    assert not record.ok and record.stalled
    assert record.error == "StallError: no response headers for 1 s (workload.stall_timeout_s)"
    assert 1 <= record.e2e_s < 10


@pytest.mark.no_engine_server
def test_a_server_dying_mid_stream_fails_the_request_with_partial_timings():
    process, url = fake_server("--die-after", "5", "--itl-ms", "5")
    try:
        result = run_against(url, "workload.max_tokens=20")
    finally:
        process.wait(timeout=10)
    (record,) = result.records
    assert not record.ok and record.error
    assert (
        record.ttft_s is not None and len(record.itl_s) == 4
    )  # five tokens arrived before it died


@pytest.mark.no_engine_server
def test_open_loop_arrivals_are_not_pinned_to_slots_and_streams_are():
    """A server of 4 slots that refuses a slot it does not have: 24 Poisson arrivals over 4
    streams all succeed (at 2d2eba0 arrival k asked for slot k: llama.cpp b11434 served it on
    slot k mod 4, waiting for that slot while others were free), and 4 closed-loop streams
    keep their slots 0-3."""
    process, url = fake_server("--slot-count", "4")
    try:
        opened = run_against(
            url, "concurrency=poisson", "concurrency.rate=50", "concurrency.arrivals=24",
            "concurrency.streams=4", "workload.max_tokens=4",
        )  # fmt: skip
        closed = run_against(url, "concurrency.streams=4", "workload.max_tokens=4")
    finally:
        process.kill()
        process.wait()
    assert len(opened.records) == 24 and all(r.ok for r in opened.records)
    assert len(closed.records) >= 4 and all(r.ok for r in closed.records)

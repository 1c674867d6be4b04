"""A run starts on an idle server in a defined state: the idle wait on recorded /slots and
/metrics readings of a real llama.cpp server (busy during a 4-stream run, then idle),
vLLM's and SGLang's load gauges, what flushes a cache, and fresh prompts keyed by the
job's own settings."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from specexp.core.measurements import RequestRecord, RunResult
from specexp.engines import get_engine
from specexp.engines.evidence import caches_setting
from specexp.engines.prometheus import parse_prometheus
from specexp.engines.records import ServerLoad
from specexp.serving.pacing import wait_until_idle
from tests.conftest import QUICK, compose_job

READINGS = Path(__file__).parent / "readings"


def llamacpp_reading(state: str) -> tuple[dict[str, float], object]:
    metrics = parse_prometheus((READINGS / f"llamacpp_metrics_{state}.txt").read_text())
    slots = json.loads((READINGS / f"llamacpp_slots_{state}.json").read_text())
    return metrics, slots


class Clock:
    """Time that passes only when the waiter sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def wait_on(readings: list[tuple[dict[str, float], object]], timeout_s: float = 30.0):
    engine, clock, seen = get_engine("llamacpp"), Clock(), []

    async def probe():
        metrics, slots = readings[min(len(seen), len(readings) - 1)]
        seen.append(clock())
        return engine.server_load(metrics, slots)

    wait = asyncio.run(wait_until_idle(probe, timeout_s, 0.05, clock, clock.sleep))
    return wait, seen


def test_llamacpp_busy_and_idle_readings_are_told_apart():
    engine = get_engine("llamacpp")
    busy, idle = (engine.server_load(*llamacpp_reading(s)) for s in ("busy", "idle"))
    assert busy is not None and busy.running == 4 and not busy.idle
    assert idle is not None and idle.idle


def test_a_run_starts_once_the_server_reads_idle_and_the_wait_is_recorded():
    readings = [llamacpp_reading("busy")] * 3 + [llamacpp_reading("idle")]
    wait, seen = wait_on(readings)
    assert wait.idle and len(seen) == 4
    assert abs(wait.waited_s - 0.15) < 1e-9  # three polls of 50 ms


def test_a_server_still_busy_after_the_timeout_is_flagged_not_waited_on_forever():
    wait, seen = wait_on([llamacpp_reading("busy")], timeout_s=1.0)
    assert not wait.idle and wait.load is not None
    assert wait.load.describe() == "4 request(s) running, 0 waiting"
    assert 1.0 <= wait.waited_s < 1.1 and len(seen) == 21  # a probe every 50 ms, from 0


def test_an_engine_that_says_nothing_of_its_load_is_not_waited_on():
    async def probe():
        return None

    wait = asyncio.run(wait_until_idle(probe, 30.0))
    assert wait.idle and wait.load is None and wait.waited_s < 1


def test_vllm_and_sglang_gauges_read_as_running_and_waiting():
    vllm = get_engine("vllm").server_load(
        parse_prometheus(
            'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0\n'
        ),
        None,
    )
    sglang = get_engine("sglang").server_load(
        parse_prometheus('sglang:num_running_reqs{model_name="m"} 0.0\nsglang:num_queue_reqs 0\n'),
        None,
    )
    assert vllm == ServerLoad(3.0, 2.0) and not vllm.idle
    assert sglang == ServerLoad(0.0, 0.0) and sglang.idle


def test_a_unified_kv_cache_is_emptied_slot_by_slot_before_each_fresh_run():
    _, slots = llamacpp_reading("idle")
    unified = compose_job(*QUICK, "engine.kv_unified=true", "workload.prompts=fresh")
    flushes = unified.engine.cache_flush(unified.server, slots)
    assert flushes == [("POST", f"/slots/{s['id']}?action=erase") for s in slots]
    assert "--kv-unified" in unified.planned_launch().argv
    separate = compose_job(*QUICK, "workload.prompts=fresh")
    assert separate.engine.cache_flush(separate.server, slots) == []


def test_split_kv_slots_are_released_in_id_order_before_each_fresh_run():
    """llama.cpp hands out the idle slot released longest ago and batches only consecutive
    slot ids without a unified KV cache: one-token requests pinned to slots 0, 1, 2... in
    turn give the next run the order a fresh server has."""
    _, slots = llamacpp_reading("idle")
    separate = compose_job(*QUICK, "workload.prompts=fresh")
    reorders = separate.engine.slot_order(separate.server, list(reversed(slots)))
    assert [body["id_slot"] for _, body in reorders] == sorted(s["id"] for s in slots)
    assert {path for path, _ in reorders} == {"/completion"}
    assert all(body["n_predict"] == 1 for _, body in reorders)
    unified = compose_job(*QUICK, "engine.kv_unified=true", "workload.prompts=fresh")
    assert unified.engine.slot_order(unified.server, slots) == []  # any slots batch together
    elsewhere = compose_job(*QUICK, "engine.url=http://10.0.0.5:8080")
    assert elsewhere.engine.slot_order(elsewhere.server, slots) == []  # not ours to reorder
    assert separate.engine.slot_order(separate.server, slots[:1]) == []
    assert separate.engine.slot_order(separate.server, None) == []


def test_the_host_prompt_cache_is_off_unless_the_caches_are_the_subject():
    measured = compose_job(*QUICK).planned_launch().argv
    studied = compose_job(*QUICK, "workload.caches=kept").planned_launch().argv
    assert measured[measured.index("--cache-ram") + 1] == "0"
    assert "--cache-ram" not in studied


def test_each_stream_is_pinned_to_a_slot_of_its_own_when_there_is_one():
    job = compose_job(*QUICK, "concurrency.streams=4")
    assert job.engine.stream_fields(job.server, 3) == {"id_slot": 3}
    fewer_slots = compose_job(*QUICK, "concurrency.streams=4", "engine.parallel_slots=2")
    assert fewer_slots.engine.stream_fields(fewer_slots.server, 3) == {}
    unpinned = compose_job(*QUICK, "engine.pin_slots=false")
    assert unpinned.engine.stream_fields(unpinned.server, 0) == {}


def test_fresh_prompts_of_jobs_sharing_a_server_differ_and_arms_of_a_level_share_them():
    fresh = (*QUICK, "workload.prompts=fresh")
    four, sixteen = (compose_job(*fresh, f"concurrency.streams={n}") for n in (4, 16))
    draft = compose_job(*fresh, "concurrency.streams=4", "speculative=draft")
    assert four.server_fingerprint() != draft.server_fingerprint()
    assert four.prompt_namespace() != sixteen.prompt_namespace()
    assert four.prompt_namespace() == draft.prompt_namespace()
    replicate = compose_job(*fresh, "concurrency.streams=4", "replicate=1")
    assert replicate.prompt_namespace() != four.prompt_namespace()
    # A switched-off arm is served by the fixed arms' own servers (at 4 streams, the one
    # without speculation): it must not send their prompts.
    switched = compose_job(
        *fresh, "concurrency.streams=4", "speculative=draft_switch_off", "+multirun.switch_off_at=2"
    )
    assert switched.server_fingerprint() == four.server_fingerprint()
    assert switched.prompt_namespace() != four.prompt_namespace()

    workload = four.config.workload
    same_request = "0/3/False/0/0"
    assert workload.prompt_for(f"{four.prompt_namespace()}/{same_request}") != workload.prompt_for(
        f"{sixteen.prompt_namespace()}/{same_request}"
    )


def run_with_cached(tokens: list[int], prompt: int = 100) -> list[RunResult]:
    records = [
        RequestRecord(
            run=0,
            stream=i,
            warmup=False,
            start_unix=0.0,
            ok=True,
            output_tokens=8,
            prompt_tokens=prompt,
            prompt_cached_tokens=cached,
        )
        for i, cached in enumerate(tokens)
    ]
    return [RunResult(run=0, warmup=False, wall_s=1.0, records=records)]


def test_fresh_prompts_that_found_earlier_prompts_cached_are_caught():
    job = compose_job(*QUICK, "workload.prompts=fresh")
    clean = caches_setting(job.server, run_with_cached([1, 0, 3, 1]))
    reused = caches_setting(job.server, run_with_cached([1, 99, 0, 98]))
    assert clean.status == "engaged" and clean.actual == "no prompt served from earlier requests"
    assert reused.status == "not engaged"
    assert (
        reused.actual == "2 of 4 request(s) found earlier prompts cached (49.2% of prompt tokens)"
    )
    assert "198 of 400 prompt tokens" in reused.evidence
    assert reused.requested == "none (prompts=fresh)"  # said as caches=none, not caches=caches=


def test_one_request_of_many_found_cached_is_said_in_proportion_not_as_not_engaged():
    """The console once said NOT ENGAGED, in bold red, for 1 request of 128 (2.8% of the
    prompt tokens cached)."""
    job = compose_job(*QUICK, "workload.prompts=fresh")
    one = caches_setting(job.server, run_with_cached([0] * 127 + [90]))
    assert one.status == "engaged"
    assert one.actual == "1 of 128 request(s) found earlier prompts cached (0.7% of prompt tokens)"
    fixed = compose_job(*QUICK)
    assert (
        caches_setting(fixed.server, run_with_cached([99, 99])).actual == "fixed prompt: 99% cached"
    )


def test_prefix_caches_are_flushed_on_servers_specexp_starts_only():
    vllm = compose_job("engine=vllm", "stack=vllm-cpu", "model=tiny-pair-small")
    assert vllm.engine.cache_flush(vllm.server, None) == [("POST", "/reset_prefix_cache")]
    assert vllm.planned_launch().env["VLLM_SERVER_DEV_MODE"] == "1"  # where that endpoint is
    elsewhere = compose_job(
        "engine=vllm", "model=tiny-pair-small", "engine.url=http://10.0.0.5:8000"
    )
    assert elsewhere.engine.cache_flush(elsewhere.server, None) == []
    sglang = compose_job("engine=sglang", "model=kimi-k2.5", "stack=cu130")
    assert sglang.engine.cache_flush(sglang.server, None) == [("POST", "/flush_cache")]

"""What the engine will run is known before launch: versions it composes for, features a
configuration needs, notes on settings it will take differently, capacity pinned per arm."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import threading

import pytest

from specexp.core.schemas.checks import ConfigError
from specexp.engines.http import is_local
from specexp.engines.prometheus import parse_prometheus
from specexp.engines.records import Engagement
from specexp.hydra_app import prepare
from specexp.serving.client import LoadClient
from tests.conftest import compose_job, compose_run

KIMI = ("engine=sglang", "model=kimi-k2.5")


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ("stack=cu130", "stack.versions.sglang=banana"),
            "SGLang version 'banana' (declared by stack cu130) is not a version",
        ),
        (
            ("stack=cu130", "stack.versions.sglang=0.4.0"),
            "SGLang 0.4.0 (stack cu130) is older than 0.5.9",
        ),
        (
            ("stack=cu128", "speculative=eagle3", "stack.backports=[]"),
            "needs SGLang >= 0.5.10 (the EAGLE-3 worker calls model.get_embed_and_head()",
        ),
    ],
)
def test_versions_and_features_a_stack_lacks_are_refused_before_launch(overrides, message):
    with pytest.raises(ConfigError) as error:
        prepare(compose_run(*KIMI, *overrides))
    assert message in str(error.value)


def test_a_release_with_the_feature_or_a_declared_backport_is_accepted():
    backport = prepare(compose_run(*KIMI, "stack=cu128", "speculative=eagle3"))
    release = prepare(
        compose_run(
            *KIMI,
            "stack=cu128",
            "speculative=eagle3",
            "stack.backports=[]",
            "stack.versions.sglang=0.5.10",
        )
    )
    for job in (backport, release):
        argv = job.planned_launch().argv
        assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"


def test_an_unknown_version_and_an_untranslatable_knob_are_said_before_launch():
    job = compose_job(*KIMI, "stack=local", "speculative=ngram")
    notes = job.engine.plan_notes(job.server)
    assert any("SGLang version unknown" in n and "spelled for 0.5.23" in n for n in notes)
    assert any("ngram_size=4 has no SGLang 0.5.23 equivalent" in n for n in notes)
    known = compose_job(*KIMI, "stack=cu130", "speculative=ngram")
    notes = known.engine.plan_notes(known.server)
    assert not [n for n in notes if "ngram" in n]  # 0.5.9 has the n-gram window
    argv = known.command.at(30000).argv
    assert argv[argv.index("--speculative-ngram-max-match-window-size") + 1] == "4"


def test_every_arm_runs_with_the_same_request_cap_and_cuda_graphs():
    """Unset, SGLang would hold the speculative arms to 48 requests and capture other CUDA
    graph batch sizes for them than for the baseline."""
    releases = {
        "--cuda-graph-bs": ("stack=cu130",),  # SGLang 0.5.9
        "--cuda-graph-bs-decode": ("stack=local", "+stack.versions.sglang=0.5.23"),
    }
    for graphs_flag, stack in releases.items():
        capacities = set()
        for method in ("none", "eagle3", "ngram", "draft"):
            job = compose_job(*KIMI, *stack, f"speculative={method}", "model.draft_path=org/d")
            argv = job.command.at(30000).argv
            start = argv.index(graphs_flag) + 1
            graphs = tuple(argv[start : argv.index("--enable-metrics")])
            capacities.add((argv[argv.index("--max-running-requests") + 1], graphs))
        ((cap, graphs),) = capacities
        assert cap == "64" and graphs[0] == "1" and graphs[-1] == "64"


def test_custom_allreduce_on_many_pcie_gpus_is_refused_and_otherwise_named_the_same_as_auto():
    with pytest.raises(ConfigError, match="SGLang turns custom all-reduce off there itself"):
        prepare(
            compose_run(
                *KIMI, "stack=cu130", "allreduce_backend=custom", "host.gpu_interconnect=pcie"
            )
        )
    job = compose_job(*KIMI, "stack=cu130", "allreduce_backend=custom")
    (note,) = [n for n in job.engine.plan_notes(job.server) if "custom" in n]
    assert "the server of allreduce_backend=auto" in note and "host.gpu_interconnect" in note
    nvlink = compose_job(
        *KIMI, "stack=cu130", "allreduce_backend=custom", "host.gpu_interconnect=nvlink"
    )
    auto = compose_job(*KIMI, "stack=cu130", "allreduce_backend=auto")
    assert nvlink.server_fingerprint() == auto.server_fingerprint()


def test_fusion_that_sglang_would_turn_on_by_itself_is_kept_off_or_refused():
    # 0.5.23 has the off switch: every Kimi-K2.5 arm that did not ask for fusion passes it.
    job = compose_job(
        *KIMI, "stack=local", "+stack.versions.sglang=0.5.23", "allreduce_backend=nccl"
    )
    assert "--enforce-disable-flashinfer-allreduce-fusion" in job.planned_launch().argv
    fused = compose_job(*KIMI, "stack=local", "+stack.versions.sglang=0.5.23")
    assert "--enforce-disable-flashinfer-allreduce-fusion" in fused.planned_launch().argv
    asked = compose_job(
        *KIMI, "stack=local", "+stack.versions.sglang=0.5.23", "allreduce_backend=flashinfer_fusion"
    )
    assert "--enforce-disable-flashinfer-allreduce-fusion" not in asked.planned_launch().argv
    # 0.5.9 has none: on SM90 the arm is refused; unknown GPUs are named in the dry run.
    with pytest.raises(ConfigError, match="has no switch to keep it off"):
        prepare(
            compose_run(
                *KIMI, "stack=cu130", "allreduce_backend=nccl", "host.gpu_compute_capability='9.0'"
            )
        )
    prepare(
        compose_run(
            *KIMI, "stack=cu130", "allreduce_backend=nccl", "host.gpu_compute_capability='12.0'"
        )
    )
    job = compose_job(*KIMI, "stack=cu130", "allreduce_backend=nccl")
    assert any(
        "declare host.gpu_compute_capability" in n for n in job.engine.plan_notes(job.server)
    )


def test_what_the_live_server_reports_is_checked_against_the_command():
    """SGLang's /server_info (its resolved arguments) after a run: a rewrite of the
    command's speculative settings or request cap is a not-engaged setting with the change."""
    job = compose_job(*KIMI, "stack=cu130", "speculative=eagle3")
    composed = {
        "attention_backend": "flashinfer",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "max_running_requests": 64,
    }
    for info, status, actual in (
        (composed, Engagement.engaged, "as composed"),
        ({**composed, "max_running_requests": 48}, Engagement.not_engaged, "-requests 64 -> 48"),
    ):
        with serving({"/server_info": info}) as url:
            setting = job.engine.effective(job.server, job.command, url, "", [])["resolution"]
        assert setting.status == status and setting.actual.endswith(actual)


@contextlib.contextmanager
def serving(documents: dict):
    """A local HTTP server answering GET PATH with the JSON document for it."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = json.dumps(documents.get(self.path)).encode()
            self.send_response(200 if self.path in documents else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def test_llamacpp_slots_and_their_context_are_checked_against_the_command():
    job = compose_job("concurrency.streams=2", "engine.ctx_size=1024", "workload=short")
    props = {"total_slots": 2, "default_generation_settings": {"n_ctx": 512}}  # as /props says
    with serving({"/props": props}) as url:
        setting = job.engine.effective(job.server, job.command, url, "", [])["resolution"]
    assert (
        setting.status == Engagement.engaged and setting.actual == "2 slots x 512 tokens of context"
    )
    with serving({"/props": {**props, "total_slots": 1}}) as url:
        setting = job.engine.effective(job.server, job.command, url, "", [])["resolution"]
    assert setting.status == Engagement.not_engaged and setting.actual == "slots 2 -> 1"


def test_llamacpp_rounds_each_slots_context_up_to_256_tokens():
    job = compose_job("concurrency.streams=3", "engine.ctx_size=4096", "workload=short")
    props = {"total_slots": 3, "default_generation_settings": {"n_ctx": 1536}}  # as /props says
    with serving({"/props": props}) as url:
        setting = job.engine.effective(job.server, job.command, url, "", [])["resolution"]
    assert setting.status == Engagement.engaged, setting


def test_vllm_live_config_is_checked_against_the_command():
    job = compose_job("engine=vllm", "model=tiny-pair-small", "speculative=ngram")
    launch = job.command.at(8000)
    assert launch.env["VLLM_SERVER_DEV_MODE"] == "1"  # /server_info, on loopback only
    config = {  # as vLLM 0.32's /server_info?config_format=json reports them (abridged)
        "scheduler_config": {"max_num_seqs": 64, "max_num_batched_tokens": 2048},
        "speculative_config": {
            "method": "ngram",
            "model": "ngram",
            "num_speculative_tokens": 4,
            "prompt_lookup_min": 4,
            "prompt_lookup_max": 4,
        },
    }
    with serving({"/server_info?config_format=json": {"vllm_config": config}}) as url:
        setting = job.engine.effective(job.server, job.command, url, "", [])["resolution"]
    assert setting.status == Engagement.engaged, setting
    config["speculative_config"]["prompt_lookup_min"] = 1
    with serving({"/server_info?config_format=json": {"vllm_config": config}}) as url:
        setting = job.engine.effective(job.server, job.command, url, "", [])["resolution"]
    assert setting.status == Engagement.not_engaged
    assert setting.actual == "speculative_config.prompt_lookup_min 4 -> 1"
    exposed = compose_job("engine=vllm", "model=tiny-pair-small", "engine.host=0.0.0.0")
    assert "VLLM_SERVER_DEV_MODE" not in exposed.command.at(8000).env


def test_labelled_prometheus_samples_are_summed_by_name():
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 7.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 3.0\n'
        "llamacpp:n_drafted_total 5\n"
    )
    assert parse_prometheus(text) == {
        "vllm:spec_decode_num_drafts_total": 10.0,
        "llamacpp:n_drafted_total": 5.0,
    }


def test_servers_specexp_starts_are_reached_without_proxies_and_others_through_them():
    assert all(
        is_local(u)
        for u in ("http://127.0.0.1:8000", "http://localhost:1", "http://[::1]:2", "0.0.0.0")
    )
    assert not any(is_local(u) for u in ("http://10.0.0.7:8000", "https://api.example.com", ""))
    job = compose_job()

    async def trusts_env(url: str) -> bool:
        client = LoadClient(
            job.engine, url, job.server, job.config.workload, job.config.concurrency
        )
        async with client.session() as http:
            return http.trust_env

    assert asyncio.run(trusts_env("http://127.0.0.1:8000")) is False
    assert asyncio.run(trusts_env("http://10.0.0.7:8000")) is True


@pytest.mark.parametrize(
    "overrides,split,allreduce",
    [
        ((), None, None),  # a CPU server: no split, no offload
        (("engine.gpus=1",), None, None),  # one GPU: llama.cpp's default
        (("engine.gpus=1", "engine.split_mode=tensor"), "tensor", None),  # the TP path on one
        (("engine.gpus=2",), "tensor", None),  # several: tensor parallel by default
        (("engine.gpus=4", "engine.split_mode=layer"), "layer", None),
        (("engine.gpus=8", "allreduce_backend=nccl"), "tensor", "nccl"),
        (("engine.gpus=2", "allreduce_backend=custom"), "tensor", "internal"),
    ],
)
def test_llamacpp_splits_a_server_over_its_gpus_as_configured(overrides, split, allreduce):
    job = compose_job("workload=short", *overrides)
    launch = job.command.at(8080)
    argv = launch.argv
    assert (argv[argv.index("--split-mode") + 1] if "--split-mode" in argv else None) == split
    assert launch.env.get("GGML_CUDA_ALLREDUCE") == allreduce
    assert ("--n-gpu-layers" in argv) == ("engine.gpus" in " ".join(overrides))


@pytest.mark.parametrize(
    "overrides,log,actual,engaged",
    [
        (("engine.gpus=2",), "", "nccl", Engagement.engaged),
        (
            ("engine.gpus=2", "allreduce_backend=nccl"),
            "NCCL not compiled in; falling back to internal AllReduce.  Recompile with",
            "internal",
            Engagement.not_engaged,
        ),
        (
            ("engine.gpus=4",),
            "NCCL init failed (unhandled system error); falling back to internal AllReduce\n"
            "internal AllReduce init failed (n_devices != 2?); falling back to meta-backend "
            "butterfly",
            "butterfly (generic copies)",
            Engagement.engaged,  # auto asked for llama.cpp's choice, and says what it was
        ),
        (("engine.gpus=1",), "", "none (no all-reduce)", Engagement.engaged),
    ],
)
def test_llamacpp_says_which_all_reduce_its_tensor_split_ran(overrides, log, actual, engaged):
    """Read from the warnings ggml-cuda (b11434, ggml_backend_cuda_comm_init) logs when it
    falls back from NCCL to its own kernel and from that to generic copies."""
    job = compose_job("workload=short", *overrides)
    setting = job.engine.effective(job.server, job.command, "http://127.0.0.1:9", log, [])[
        "allreduce_backend"
    ]
    assert (setting.actual, setting.status) == (actual, engaged)


@pytest.mark.parametrize(
    ("log", "actual", "engaged"),
    [
        ("graphs reused =          0\ngraphs reused =          0", "off", Engagement.engaged),
        ("graphs reused =          0\ngraphs reused =        127", "on", Engagement.not_engaged),
    ],
)
def test_llamacpp_says_whether_graph_reuse_was_off_as_its_stack_asked(log, actual, engaged):
    """reference_cpu's older-stack stand-in (LLAMA_GRAPH_REUSE_DISABLE=1) is checked against
    each task's "graphs reused" count in the server log (b11434's print_timing); a stack that
    leaves reuse on asks nothing of it."""
    off = compose_job("+sweep=reference_cpu", "+cpu_case=graph-reuse-off")
    setting = off.engine.effective(off.server, off.command, "http://127.0.0.1:9", log, [])[
        "graph_reuse"
    ]
    assert (setting.actual.split()[0], setting.status) == (actual, engaged)
    on = compose_job("+sweep=reference_cpu", "+cpu_case=baseline")
    assert "graph_reuse" not in on.engine.effective(
        on.server, on.command, "http://127.0.0.1:9", log, []
    )

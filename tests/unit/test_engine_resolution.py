"""What the engine will run is known before launch: versions it composes for, features a
configuration needs, notes on settings it will take differently, capacity pinned per arm."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading

import pytest

from specexp.engines.base import Engagement
from specexp.job import prepare
from specexp.schemas import ConfigError
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
    prepare(compose_run(*KIMI, "stack=cu128", "speculative=eagle3"))  # backport declared
    prepare(
        compose_run(
            *KIMI,
            "stack=cu128",
            "speculative=eagle3",
            "stack.backports=[]",
            "stack.versions.sglang=0.5.10",
        )
    )


def test_an_unknown_version_and_an_untranslatable_knob_are_said_before_launch():
    job = compose_job(*KIMI, "stack=local", "speculative=ngram")
    notes = job.engine.plan_notes(job.server)
    assert any("SGLang version unknown" in n and "spelled for 0.5.23" in n for n in notes)
    assert any("ngram_size=4 has no SGLang 0.5.23 equivalent" in n for n in notes)
    known = compose_job(*KIMI, "stack=cu130", "speculative=ngram")
    notes = known.engine.plan_notes(known.server)
    assert not [n for n in notes if "ngram" in n]  # 0.5.9 has the n-gram window
    argv = known.engine.launch_spec(known.server, 30000).argv
    assert argv[argv.index("--speculative-ngram-max-match-window-size") + 1] == "4"


def test_every_arm_runs_with_the_same_request_cap():
    caps = set()
    for method in ("none", "eagle3", "ngram"):
        job = compose_job(*KIMI, "stack=cu130", f"speculative={method}")
        argv = job.engine.launch_spec(job.server, 30000).argv
        caps.add(argv[argv.index("--max-running-requests") + 1])
    assert caps == {"64"}  # unset, SGLang would hold the speculative arms to 48


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
            setting = job.engine.effective(job.server, url, "", [])["resolution"]
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
    job = compose_job("concurrency.streams=2", "engine.ctx_size=1024")
    props = {"total_slots": 2, "default_generation_settings": {"n_ctx": 512}}  # as /props says
    with serving({"/props": props}) as url:
        setting = job.engine.effective(job.server, url, "", [])["resolution"]
    assert (
        setting.status == Engagement.engaged and setting.actual == "2 slots x 512 tokens of context"
    )
    with serving({"/props": {**props, "total_slots": 1}}) as url:
        setting = job.engine.effective(job.server, url, "", [])["resolution"]
    assert setting.status == Engagement.not_engaged and setting.actual == "slots 2 -> 1"


def test_llamacpp_rounds_each_slots_context_up_to_256_tokens():
    job = compose_job("concurrency.streams=3", "engine.ctx_size=4096")
    props = {"total_slots": 3, "default_generation_settings": {"n_ctx": 1536}}  # as /props says
    with serving({"/props": props}) as url:
        setting = job.engine.effective(job.server, url, "", [])["resolution"]
    assert setting.status == Engagement.engaged, setting

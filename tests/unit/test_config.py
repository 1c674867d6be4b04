"""Composition: configs are converted once into their schemas; a config that cannot run
fails before anything launches, naming the option and what to change."""

from __future__ import annotations

import re
import sys

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from specexp.core.schemas.attention_backend import AttentionBackend
from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.multirun import JobOrder
from specexp.core.schemas.run import RunConfig
from specexp.core.schemas.speculative import SpeculativeMethod
from specexp.core.schemas.stats import StatsConfig
from specexp.core.tinymodels import TinyPairSpec
from specexp.engines.llamacpp import LlamaCppConfig
from specexp.hydra_app import prepare
from specexp.serving.pacing import stream_shares
from tests.conftest import compose_job, compose_run

BAD_CONFIGS = [
    # (overrides, words the message must contain)
    (["concurrency=ramp", "concurrency.levels=[1,0]"], ["concurrency.levels", "[1, 0]"]),
    (
        ["allreduce_backend=nccl"],
        ["allreduce_backend=nccl", "engine=llamacpp", "tensor split over several GPUs"],
    ),
    (
        ["allreduce_backend=flashinfer_fusion"],
        ["allreduce_backend=flashinfer_fusion", "Use allreduce_backend=auto"],
    ),
    (
        ["engine.gpus=2", "allreduce_backend=flashinfer_fusion"],
        ["allreduce_backend=flashinfer_fusion", "GGML_CUDA_ALLREDUCE", "auto, nccl, custom"],
    ),
    (
        ["engine.gpus=2", "engine.split_mode=layer", "allreduce_backend=nccl"],
        ["split_mode=layer", "passes activations from GPU to GPU"],
    ),
    (
        ["engine.gpus=4", "allreduce_backend=custom"],
        ["allreduce_backend=custom", "exactly 2", "engine.gpus=4"],
    ),
    (["engine.split_mode=tensor"], ["engine.split_mode=tensor needs GPUs", "engine.gpus >= 1"]),
    (["engine.gpus=2", "engine.split_mode=none"], ["engine.split_mode=none uses one GPU"]),
    (
        ["speculative=eagle3"],
        ["speculative=eagle3 needs a draft model", "eagle3_draft_path", "speculative.draft_model"],
    ),
    (
        ["engine=sglang", "model=kimi-k2.5", "speculative=eagle3", "model.eagle3_draft_path=null"],
        ["speculative=eagle3 needs a draft model"],
    ),
    (
        ["engine=sglang", "model=kimi-k2.5", "attention_backend=flash_attn"],
        ["attention_backend=flash_attn", "engine=sglang", "flashinfer", "triton"],
    ),
    (
        ["engine=llamacpp", "attention_backend=flashinfer"],
        ["attention_backend=flashinfer", "flash_attn, no_flash_attn"],
    ),
    (
        ["engine=sglang", "model=kimi-k2.5", "engine.tensor_parallel_size=4"],
        ["engine.tensor_parallel_size=4", "model=kimi-k2.5", "[8]"],
    ),
    (
        ["engine=vllm", "model=kimi-k2.5", "engine.tensor_parallel_size=2"],
        ["engine.tensor_parallel_size=2", "[8]"],
    ),
    (
        ["engine.tensor_parallel_size=2", "model.tensor_parallel_sizes=[1,2]"],
        ["engine.tensor_parallel_size=2", "engine=llamacpp", "use 1"],
    ),
    (
        ["engine=vllm", "model=kimi-k2.5", "allreduce_backend=flashinfer_fusion"],
        ["allreduce_backend=flashinfer_fusion", "engine=vllm", "nccl"],
    ),
    (["workload.max_tokens=0"], ["workload.max_tokens must be >= 1"]),
    (["stats.measured_runs=0"], ["stats.measured_runs must be >= 1"]),
    (["stats.launches=0"], ["stats.launches must be >= 1"]),
    (["stats.threshold=0"], ["stats.threshold must be between 0 and 1"]),
    (["engine.gpus=-1"], ["engine.gpus must be >= 0"]),
    (
        ["engine=sglang", "model=kimi-k2.5", "engine.gpus=4"],
        ["engine.gpus=4 cannot hold tensor parallel 8"],
    ),
    (["concurrency.duration_s=0"], ["concurrency.duration_s must be > 0"]),
    (["speculative=ngram", "speculative.ngram_size=0"], ["speculative.ngram_size must be >= 1"]),
    (["model=tiny-pair", "model.generate.divergence=-1"], ["model.generate", "divergence"]),
]


@pytest.mark.parametrize("overrides,words", BAD_CONFIGS, ids=[" ".join(o) for o, _ in BAD_CONFIGS])
def test_bad_config_is_rejected_with_a_message_that_says_what_to_change(overrides, words):
    cfg = compose_run(*overrides)
    with pytest.raises(ConfigError) as error:
        prepare(cfg)
    assert "\n" not in str(error.value)
    for word in words:
        assert word in str(error.value)


def test_good_configs_pass_and_compose_what_they_ask():
    for overrides, wanted in (
        (["speculative=draft"], ["--spec-type", "draft-simple"]),
        (["speculative=ngram"], ["--spec-type", "ngram-simple"]),
        (["attention_backend=flash_attn"], ["--flash-attn", "on"]),
        (
            [
                "engine=sglang",
                "model=kimi-k2.5",
                "stack=cu130",
                "speculative=eagle3",
                "allreduce_backend=flashinfer_fusion",
                "attention_backend=flashinfer",
            ],
            ["--attention-backend", "flashinfer", "--speculative-algorithm", "EAGLE3"],
        ),
        (
            [
                "engine=vllm",
                "model=kimi-k2.5",
                "speculative=eagle3",
                "attention_backend=flashinfer",
            ],
            ["--attention-backend", "FLASHINFER"],
        ),
    ):
        argv = prepare(compose_run(*overrides)).planned_launch().argv
        pairs = list(zip(argv, argv[1:], strict=False))
        assert all(
            (flag, value) in pairs for flag, value in zip(wanted[::2], wanted[1::2], strict=True)
        ), (
            overrides,
            argv,
        )


@pytest.mark.parametrize(
    "override,choices",
    [
        ("speculative.method=medusa", "none, eagle3, ngram, draft"),
        ("attention_backend.name=flashinfr", "flashinfer"),
        ("multirun.order=shuffled", "interleaved, blocked"),
    ],
)
def test_an_unknown_choice_fails_at_composition_listing_the_choices(override, choices):
    with pytest.raises(ConfigCompositionException) as error:
        compose_run(override)
    assert isinstance(error.value.__cause__, ValidationError) and choices in str(
        error.value.__cause__
    )


def test_the_config_is_converted_once_into_its_schemas():
    job = compose_job("model=tiny-pair", "speculative=draft", "attention_backend=flash_attn")
    config = job.config
    assert isinstance(config, RunConfig) and isinstance(config.engine, LlamaCppConfig)
    assert isinstance(config.stats, StatsConfig) and isinstance(config.model.generate, TinyPairSpec)
    assert config.speculative.method is SpeculativeMethod.draft
    assert config.attention_backend.name is AttentionBackend.flash_attn
    assert config.multirun.order is JobOrder.interleaved
    # The generated pair's paths are filled in from the typed config, and the draft's
    # weights default to the model's own draft.
    assert (
        config.speculative.draft_model == config.model.draft_path
        and config.model.draft_path.endswith("draft.gguf")
    )
    # An engine is told the server settings, not the run config.
    assert job.server.engine is config.engine and job.server.streams == config.concurrency.streams


def test_fingerprints_separate_what_is_measured_from_how_it_is_tracked():
    base = compose_job()
    assert (
        compose_job("tracking.experiment=other", "multirun.seed=3").config_fingerprint()
        == base.config_fingerprint()
    )
    assert compose_job("workload.max_tokens=7").config_fingerprint() != base.config_fingerprint()
    # Client-side settings share the server; server settings do not.
    assert (
        compose_job("concurrency.requests_per_stream=3").server_fingerprint()
        == base.server_fingerprint()
    )
    assert compose_job("speculative=draft").server_fingerprint() != base.server_fingerprint()


def test_draft_tokens_mean_one_thing_on_every_engine():
    """Tokens drafted per verification, not counting the verified one: llama.cpp and vLLM
    take the number as it is, SGLang counts the verified token too and, with top-k 1, drafts
    one token per step."""
    overrides = ("model=tiny-pair", "speculative=draft", "speculative.num_draft_tokens=6")
    llamacpp = compose_job(*overrides)
    argv = llamacpp.command.at(8080).argv
    assert argv[argv.index("--spec-draft-n-max") + 1] == "6"
    vllm = compose_job(*overrides, "engine=vllm")
    argv = vllm.command.at(8000).argv
    assert '"num_speculative_tokens":6' in argv[argv.index("--speculative-config") + 1]
    sglang = compose_job(*overrides, "engine=sglang", "stack=cu130")
    argv = sglang.command.at(30000).argv
    flags = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--spec")}
    assert flags["--speculative-num-draft-tokens"] == "7"
    assert flags["--speculative-num-steps"] == "6" and flags["--speculative-eagle-topk"] == "1"


@pytest.mark.parametrize(
    "overrides,message",
    [
        (("speculative.num_steps=3",), "drafts 3 tokens (a chain: one per step)"),
        (("speculative.eagle_topk=4",), "set speculative.num_steps (its depth)"),
    ],
)
def test_draft_steps_that_an_engine_would_silently_change_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        prepare(compose_run("speculative=draft", *overrides))


def test_llamacpp_context_holds_a_whole_request_in_every_slot():
    """The issue's case: 4096 tokens over 8 slots is 512 per request, too few for 512 new
    tokens after the prompt; refused with the numbers. Left unset, it is sized to fit."""
    with pytest.raises(
        ConfigError, match=r"engine.ctx_size=4096 over 8 slots gives each request 512"
    ):
        compose_job("concurrency.streams=8", "workload.max_tokens=512", "engine.ctx_size=4096")
    job = compose_job("concurrency.streams=8", "workload.max_tokens=512")
    argv = job.command.at(8080).argv
    per_slot = int(argv[argv.index("--ctx-size") + 1]) // 8
    assert per_slot >= job.server.request_tokens > 512 and per_slot % 256 == 0


def test_an_endpoint_is_a_url():
    with pytest.raises(ConfigError, match="engine.url must be http://HOST:PORT"):
        compose_job("engine.url=localhost:8000")
    assert compose_job("engine.url=https://serving.example:443").config.engine.url


def test_a_prompt_in_tokens_is_exactly_that_long_and_fresh_only_when_asked():
    """Token ids from the server's tokenizer, repeated or cut to length; fixed prompts are one
    prompt (the prompt cache serves it), fresh ones differ from their first token on."""
    text, words = [11, 12, 13], [501, 502, 503, 504, 505, 506]
    fixed = compose_job("workload=single_stream", "workload.prompt_tokens=8").config.workload
    assert fixed.prompt_ids_for("a", text, words) == [11, 12, 13, 11, 12, 13, 11, 12]
    assert fixed.prompt_ids_for("b", text, words) == fixed.prompt_ids_for("a", text, words)
    fresh = compose_job(
        "workload=single_stream", "workload.prompt_tokens=40", "workload.prompts=fresh"
    ).config.workload
    prompts = [fresh.prompt_ids_for(f"0/0/False/{s}/0", text, words) for s in range(8)]
    assert all(len(p) == 40 and set(p[:12]) <= set(words) and p[12:15] == text for p in prompts)
    assert len({tuple(p[:12]) for p in prompts}) == 8  # no two requests share a prefix
    assert prompts[0] == fresh.prompt_ids_for("0/0/False/0/0", text, words)  # seeded
    # The context a request can take counts the prompt's tokens, not its text.
    assert fresh.request_tokens_bound() == fresh.max_tokens + 40 + 1
    with pytest.raises(ConfigError, match="workload.prompt_tokens must be >= 1, got 0"):
        compose_job("workload=single_stream", "workload.prompt_tokens=0")


def test_streams_are_dealt_over_client_processes():
    assert stream_shares(5, 2) == [[0, 2, 4], [1, 3]]
    assert stream_shares(1, 4) == [[0]]  # never a worker without a stream
    assert compose_job("concurrency.streams=64").config.concurrency.processes() == 1
    assert (
        compose_job(
            "concurrency.streams=256", "concurrency.client_processes=3"
        ).config.concurrency.processes()
        == 3
    )
    with pytest.raises(ConfigError, match="concurrency.client_processes must be >= 1"):
        compose_job("concurrency.client_processes=0")


def test_concurrency_options_read_like_experiments_and_measure_the_same_at_one_level():
    ramp, cpu, saturation = (
        compose_job(f"concurrency={name}").config.concurrency
        for name in ("ramp", "ramp_cpu", "saturation")
    )
    assert ramp.levels == [1, 2, 4, 8, 16, 32, 64] and cpu.levels == [1, 2, 4, 8, 16]
    assert (saturation.streams, saturation.duration_s, saturation.levels) == (64, 60, [])
    # A level is the same measurement whichever option swept it there (resume finds it).
    assert (
        compose_job("concurrency=ramp", "concurrency.streams=4").config_fingerprint()
        == compose_job("concurrency.streams=4").config_fingerprint()
    )


@pytest.mark.parametrize(("cpus", "threads"), [("[0]", 1), ("[0,1]", 1), ("[0,1,2,3]", 3)])
def test_a_cpu_server_leaves_the_client_a_core_unless_told_its_threads(cpus, threads):
    """The advice for small machines as the default: on two cores the server gets one, the
    client measures from the other (a server on both shares one with the client)."""
    job = compose_job("model=tiny-pair-small", f"host.cpus={cpus}")
    argv = job.command.at(8080).argv
    assert argv[argv.index("--threads") + 1] == str(threads)
    assert job.engine.cpu_cores(job.server) is None  # leased as the host's share, at launch
    given = compose_job("model=tiny-pair-small", f"host.cpus={cpus}", "engine.threads=2")
    argv = given.command.at(8080).argv
    assert argv[argv.index("--threads") + 1] == "2"


@pytest.mark.parametrize(
    "overrides",
    [
        ("model=tiny-pair-small", "speculative=draft"),  # a generated pair and its draft
        ("model=gemma3-270m", "speculative=draft"),  # a packaged model and its self-draft
        ("engine=sglang", "model=kimi-k2.5", "speculative=eagle3"),  # a hub model's head
    ],
)
def test_the_composed_config_is_typed_before_any_band_reads_it(overrides):
    """Issue 63: the raw Hydra config was read in core/tinymodels.py, core/trainedmodels.py,
    engines/ and host/job.py before hydra_app typed it; now nothing below hydra_app is
    entered until it has (``to_run_config``), and the models' files are resolved from the
    typed config."""
    cfg = compose_run(*overrides)
    entered: list[tuple[str, str]] = []

    def profile(frame, event, arg):
        module = frame.f_globals.get("__name__", "")
        if event == "call" and module.startswith("specexp"):
            entered.append((module, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        prepare(cfg)
    finally:
        sys.setprofile(None)
    typed = entered.index(("specexp.hydra_app", "to_run_config"))
    assert {module for module, _ in entered[:typed]} == {"specexp.hydra_app"}, entered[:typed]

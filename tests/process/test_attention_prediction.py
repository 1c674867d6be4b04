"""SGLang's choice of attention backend, predicted from its own code (the releases
scripts/install.sh puts under .engines/) for the declared GPU: the reference story's trap is
that 0.5.9 picks triton for Kimi-K2.5 (MLA) on the RTX PRO 6000's SM 12.0. llama.cpp's
``--flash-attn auto``, predicted by its own build before launch and read back after."""

from __future__ import annotations

import pytest

from specexp.core.tinymodels import ensure_pair
from tests.conftest import TINY, compose_job, runs_in, specexp_in_process

KIMI_AUTO = (
    "engine=sglang",
    "model=kimi-k2.5",
    "stack=cu130",
    "attention_backend=auto",
    # Asked for: 0.5.9 fuses Kimi-K2.5's all-reduce by itself on SM 9.0 and 10.0 anyway.
    "allreduce_backend=flashinfer_fusion",
    "speculative=none",
)
# SGLang's own docstring and code: MLA takes fa3 on Hopper, flashinfer on SM100, else triton.
EXPECTED = {"9.0": "fa3", "10.0": "flashinfer", "12.0": "triton"}


@pytest.mark.no_engine_server
@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
@pytest.mark.parametrize("capability", sorted(EXPECTED))
def test_sglangs_own_code_picks_the_backend_for_the_declared_gpu(release, capability):
    job = compose_job(
        *KIMI_AUTO,
        f"stack.versions.sglang={release}",
        f"host.gpu_compute_capability={capability}",
    )
    predicted = job.engine.predicted_choices(job.server, [job.planned_launch()])
    assert predicted is not None, "SGLang's sources missing: run scripts/install.sh"
    (choices,), basis = predicted
    assert choices == {"attention_backend": EXPECTED[capability]}
    assert f"SGLang {release}'s own choice on SM {capability}, CUDA 13.0, MLA" in basis


@pytest.mark.no_engine_server
def test_a_given_backend_or_an_undeclared_gpu_predicts_nothing_and_says_what_to_declare():
    given = compose_job(*KIMI_AUTO[:3], "attention_backend=flashinfer", *KIMI_AUTO[4:])
    assert given.engine.predicted_choices(given.server, [given.planned_launch()]) is None
    undeclared = compose_job(*KIMI_AUTO)
    assert (
        undeclared.engine.predicted_choices(undeclared.server, [undeclared.planned_launch()])
        is None
    )
    notes = undeclared.engine.plan_notes(undeclared.server)
    assert any("declare host.gpu_compute_capability" in n and "predicted" in n for n in notes)


def test_llamacpps_flash_attention_auto_is_predicted_before_launch_as_the_server_resolves_it(
    tmp_path, tracking_env
):
    job = compose_job(*TINY, "attention_backend=auto")
    # llama-fit-params reads the model: the pair written here (the cache may be empty).
    assert job.config.model.generate is not None
    ensure_pair(job.config.model.generate, job.engine.model_format)
    predicted = job.engine.predicted_choices(job.server, [job.planned_launch()])
    assert predicted is not None, "llama-fit-params missing from the llama.cpp build"
    (choices,), basis = predicted
    assert "llama-fit-params" in basis
    dry = specexp_in_process(
        *TINY, "attention_backend=auto", "dry_run=true", cwd=tmp_path, env=tracking_env
    )
    assert f"will choose: attention_backend={choices['attention_backend']}" in dry.stdout
    run = specexp_in_process(*TINY, "attention_backend=auto", cwd=tmp_path, env=tracking_env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (measured,) = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    assert measured.data.tags["effective.attention_backend"] == choices["attention_backend"]
    # Asked for explicitly, nothing is left to llama.cpp to choose.
    given = compose_job(*TINY, "attention_backend=no_flash_attn")
    assert given.engine.predicted_choices(given.server, [given.planned_launch()]) is None


@pytest.mark.no_engine_server
def test_vllms_own_selector_predicts_the_cpu_builds_attention_backend():
    job = compose_job("engine=vllm", "stack=vllm-cpu", *TINY, "attention_backend=auto")
    # The selector reads the model's config.json: the pair in vLLM's format, written here.
    assert job.config.model.generate is not None
    ensure_pair(job.config.model.generate, job.engine.model_format)
    predicted = job.engine.predicted_choices(job.server, [job.planned_launch()])
    assert predicted is not None, "the vLLM CPU stack missing: run scripts/install.sh"
    (choices,), basis = predicted
    # vLLM's CPU platform serves standard (non-MLA) attention with CPU_ATTN alone.
    assert choices == {"attention_backend": "CPU_ATTN"} and "vLLM's own" in basis

"""Configs an engine cannot honour fail before anything launches, naming option and choices."""

from __future__ import annotations

import pytest

from specexp.config import ConfigError
from specexp.runner import prepare
from tests.conftest import compose_run, run_cli, server_pids

BAD_CONFIGS = [
    # (overrides, words the message must contain)
    (["allreduce_backend=nccl"], ["allreduce_backend=nccl", "engine=llamacpp", "valid choices: auto"]),
    (["allreduce_backend=flashinfer_fusion"], ["allreduce_backend=flashinfer_fusion", "one process"]),
    (["speculative=eagle3"], ["speculative=eagle3 needs a draft model", "eagle3_draft_path", "speculative.draft_model"]),
    (["engine=sglang", "model=kimi-k2.5", "speculative=eagle3", "model.eagle3_draft_path=null"],
     ["speculative=eagle3 needs a draft model"]),
    (["engine=sglang", "model=kimi-k2.5", "attention_backend=flash_attn"],
     ["attention_backend=flash_attn", "engine=sglang", "flashinfer", "triton"]),
    (["engine=sglang", "model=kimi-k2.5", "attention_backend.name=flashinfr"],
     ["attention_backend=flashinfr", "valid choices", "flashinfer"]),
    (["engine=llamacpp", "attention_backend=flashinfer"], ["attention_backend=flashinfer", "flash_attn, no_flash_attn"]),
    (["engine=sglang", "model=kimi-k2.5", "engine.tensor_parallel_size=4"],
     ["engine.tensor_parallel_size=4", "model=kimi-k2.5", "[8]"]),
    (["engine=vllm", "model=kimi-k2.5", "engine.tensor_parallel_size=2"], ["engine.tensor_parallel_size=2", "[8]"]),
    (["engine.tensor_parallel_size=2", "model.tensor_parallel_sizes=[1,2]"],
     ["engine.tensor_parallel_size=2", "engine=llamacpp", "use 1"]),
    (["engine=vllm", "model=kimi-k2.5", "allreduce_backend=flashinfer_fusion"],
     ["allreduce_backend=flashinfer_fusion", "engine=vllm", "nccl"]),
    (["speculative.method=medusa"], ["speculative.method='medusa'", "none, eagle3, ngram, draft"]),
    (["workload.max_tokens=0"], ["workload.max_tokens must be >= 1"]),
    (["stats.measured_runs=0"], ["stats.measured_runs and stats.launches must be >= 1"]),
    (["stats.launches=0"], ["stats.measured_runs and stats.launches must be >= 1"]),
    (["stats.threshold=0"], ["stats.threshold and stats.power must be between 0 and 1"]),
    (["model.generate.divergence=-1"], ["model.generate", "divergence"]),
]


@pytest.mark.parametrize("overrides,words", BAD_CONFIGS, ids=[" ".join(o) for o, _ in BAD_CONFIGS])
def test_bad_config_is_rejected_with_a_message_that_says_what_to_change(overrides, words):
    cfg = compose_run(*overrides)
    with pytest.raises(ConfigError) as error:
        prepare(cfg)
    for word in words:
        assert word in str(error.value)


def test_good_configs_pass():
    for overrides in (["speculative=draft"], ["speculative=ngram"], ["attention_backend=flash_attn"],
                      ["engine=sglang", "model=kimi-k2.5", "stack=cu130", "speculative=eagle3",
                       "allreduce_backend=flashinfer_fusion", "attention_backend=flashinfer"],
                      ["engine=vllm", "model=kimi-k2.5", "speculative=eagle3", "attention_backend=flashinfer"]):
        prepare(compose_run(*overrides))


def test_cli_fails_fast_without_traceback_and_launches_nothing(tmp_path, tracking_env):
    before = server_pids()
    result = run_cli("allreduce_backend=nccl", cwd=tmp_path, env=tracking_env, timeout=120)
    assert result.returncode == 2
    assert "config error: allreduce_backend=nccl is not supported by engine=llamacpp" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert server_pids() - before == set()
    assert not (tmp_path / "mlflow.db").exists()  # nothing was tracked either


def test_unknown_group_option_is_a_hydra_error_listing_choices(tmp_path):
    result = run_cli("speculative=medusa", cwd=tmp_path, timeout=120)
    assert result.returncode != 0
    assert "Could not find 'speculative/medusa'" in result.stderr
    assert "eagle3" in result.stderr and "ngram" in result.stderr

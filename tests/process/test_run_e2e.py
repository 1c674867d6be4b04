"""`python -m specexp` end to end on llama.cpp: a real server, a real MLflow store (the command's
`main` in the test process; tests/process/test_getting_started.py runs it as a user types it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from specexp import api
from specexp.analysis.results import Tag
from specexp.core.stats.tails import values_needed
from tests.conftest import QUICK as BASE
from tests.conftest import (
    nothing_tracked,
    running_in,
    runs_in,
    specexp_in_process,
    store_env,
)

QUICK = [*BASE, "stats.warmup_runs=1", "stats.measured_runs=3"]


@pytest.fixture(scope="module")
def draft_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    env = store_env(tmp)
    result = specexp_in_process(*QUICK, "speculative=draft", cwd=tmp, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = runs_in(env["MLFLOW_TRACKING_URI"])
    assert len(runs) == 1
    return runs[0], result, tmp


def test_run_lands_in_mlflow_with_params_metrics_tags(draft_run):
    run, _, _ = draft_run
    assert run.info.status == "FINISHED"
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    assert params["engine.name"] == "llamacpp" and params["speculative.method"] == "draft"
    assert params["workload.max_tokens"] == "256" and params["stats.measured_runs"] == "3"
    assert params["engine.host"] == "127.0.0.1"
    for name in (
        "tok_per_s_mean",
        "tok_per_s_std",
        "tok_per_s_cv",
        "tok_per_s_ci_low",
        "tok_per_s_ci_high",
        "ttft_s_mean",
        "itl_s_n_eff",
        "acceptance_length_mean",
        "server_ready_s",
    ):
        assert name in metrics, name
    # A percentile is reported with its interval, or not at all: too few effective values
    # (three requests of drafted chunks: the median is there or not by the requests' spread).
    for percentile in (50, 99):
        reported = metrics["itl_s_n_eff"] >= values_needed(percentile)
        assert (f"itl_s_p{percentile}" in metrics) == reported, percentile
        assert (f"itl_s_p{percentile}_ci_low" in metrics) == reported, percentile
    assert metrics["tok_per_s_ci_low"] <= metrics["tok_per_s_mean"] <= metrics["tok_per_s_ci_high"]
    assert metrics["acceptance_rate_mean"] > 0.5
    assert (
        tags["engine"] == "llamacpp"
        and tags["speculative"] == "draft"
        and tags["model"] == "tiny-pair-small"
    )
    assert tags["engine_version"] != "unknown" and len(tags["git_commit"]) >= 7 and tags["host"]


def test_the_clients_figures_agree_with_llamacpps_own_accounting(draft_run):
    """llama.cpp's /metrics over the measured runs: the tokens the client received, and a
    generation time per token that the client's time per output token must cover (it adds
    the HTTP exchange and streaming; llama.cpp keeps no TTFT or latency series)."""
    run, _, _ = draft_run
    metrics = run.data.metrics
    assert metrics["server_output_tokens_total"] == metrics["output_tokens_total"] == 3 * 256
    assert 0 < metrics["server_tpot_s_mean"]
    assert metrics["server_tpot_s_mean"] < 1.5 * metrics["tpot_s_mean"]
    # The telemetry of every measured run: the machine's cores, and those not ours.
    assert metrics["cpu_busy_cores"] > 0 and "cpu_other_cores" in metrics


def test_each_measured_run_is_a_step(draft_run):
    run, _, tmp = draft_run
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    history = client.get_metric_history(run.info.run_id, "tok_per_s")
    assert sorted(m.step for m in history) == [0, 1, 2]
    assert all(m.value > 0 for m in history)


def test_artifacts_hold_config_command_log_and_raw_records(draft_run):
    run, _, tmp = draft_run
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {
        "config.yaml",
        "command.txt",
        "environment.json",
        "requests.jsonl",
        "server.log",
    } <= names
    local = Path(client.download_artifacts(run.info.run_id, "requests.jsonl", str(tmp)))
    records = [json.loads(line) for line in local.read_text().splitlines()]
    assert len(records) == 4  # 1 warm-up + 3 measured
    assert [r["warmup"] for r in records] == [True, False, False, False]
    assert all(r["ok"] and r["output_tokens"] == 256 for r in records)
    command = Path(client.download_artifacts(run.info.run_id, "command.txt", str(tmp))).read_text()
    assert "--model-draft" in command and "--host 127.0.0.1" in command


def test_terminal_shows_progress_and_summary(draft_run):
    _, result, _ = draft_run
    assert "server ready at http://127.0.0.1:" in result.stdout
    assert "run 2:" in result.stdout  # one progress line per run when not on a terminal
    assert "tok/s" in result.stdout and "95% CI" in result.stdout
    assert "acceptance length" in result.stdout


@pytest.mark.load_tolerant
def test_failed_server_marks_the_run_failed_with_the_reason(tmp_path, tracking_env):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model")
    result = specexp_in_process(
        *QUICK, "model.generate=null", f"model.path={broken}", cwd=tmp_path, env=tracking_env
    )
    assert result.returncode == 1
    assert "server failed" in result.stdout
    (run,) = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    assert run.info.status == "FAILED"
    assert run.data.tags[Tag.failure]
    names = {
        a.path
        for a in MlflowClient(tracking_env["MLFLOW_TRACKING_URI"]).list_artifacts(run.info.run_id)
    }
    assert "server.log" in names


@pytest.mark.no_engine_server
def test_missing_model_file_is_a_config_error(tmp_path, tracking_env):
    """By the API in this process (how the command line prints a config error and exits 2
    is tests/process/test_cli.py's)."""
    overrides = [*QUICK, "model.generate=null", f"model.path={tmp_path / 'absent.gguf'}"]
    with running_in(tmp_path, tracking_env), pytest.raises(api.NotRun) as refused:
        api.run_job(overrides, quiet=True)
    assert refused.value.exit_status == 2 and refused.value.what == "config error"
    assert "model file not found" in refused.value.why
    assert nothing_tracked(tmp_path)


def test_the_speculation_profile_is_logged_and_consistent(draft_run):
    """speculation_profile.json (specdec_bench's schema 1.0) from llama.cpp's per-position
    counters: the identity holds on every measured run; the marginals are metrics too."""
    run, _, tmp = draft_run
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    path = client.download_artifacts(run.info.run_id, "speculation_profile.json", str(tmp))
    profile = json.loads(Path(path).read_text())
    assert profile["schema_version"] == "1.0" and profile["method"] == "draft"
    assert profile["validation"]["mean_consistency"]["passed"]
    assert profile["specexp"]["failed_runs"] == []
    marginals = profile["marginal_accept_rates"]
    assert len(marginals) == int(run.data.params["speculative.num_draft_tokens"])
    metrics = run.data.metrics
    assert metrics["acceptance_identity_failures"] == 0
    assert metrics["acceptance_marginal_p0"] == pytest.approx(marginals[0], abs=1e-6)
    assert metrics["acceptance_length_per_request_mean"] > 1

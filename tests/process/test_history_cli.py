"""`python -m specexp.history` on a real MLflow store: a configuration's runs whose
throughput drops 6% from the run where its server's effective attention backend changed
(values written here: this checks the command, its attribution and its exit status, not a
measurement). The command line runs once, for its exit status; its other reports are `specexp
history`'s, through the command line's main in this process."""

from __future__ import annotations

import json
import math

import numpy as np

from specexp import cli
from specexp.analysis.results import RunKind, RunStatus, Tag
from specexp.tracking.store import TrackingStore
from specexp.tracking.ui import HISTORY_HEADING, NOTE
from tests.conftest import call_main, run_cli, store_env


def write_history(uri: str, drop_at: int, runs: int = 24) -> None:
    store = TrackingStore(uri, "history")
    rng = np.random.default_rng(7)
    for i in range(runs):
        after = i >= drop_at
        backend = "triton" if after else "flashinfer"
        run = store.start_run(
            f"baseline {i}",
            {
                Tag.kind: RunKind.job,
                Tag.hardware: "8x NVIDIA RTX PRO 6000",
                "effective.attention_backend": backend,
                "stack.sglang": "0.5.9" if after else "0.5.8",
            },
        )
        run.log_params({"speculative.method": "none", "attention_backend.name": "auto"})
        for step in range(5):
            value = 90 * math.exp(rng.normal(0, 0.01) + (math.log(0.94) if after else 0))
            run.log_metrics({"tok_per_s": value, "midpoint_unix": 1.7e9 + 3600 * i + step}, step)
        run.end(RunStatus.finished)


def test_a_regression_is_found_attributed_and_fails_the_pipeline(tmp_path, capsys):
    env = store_env(tmp_path)
    write_history(env["MLFLOW_TRACKING_URI"], drop_at=16)
    args = ("--experiment", "history", "--fail-on-regression", "0.03")
    result = run_cli(*args, cwd=tmp_path, env=env, module="specexp.history")
    assert result.returncode == 3, result.stdout + result.stderr
    # The table fits 100 columns: its last column (what differs) wraps, read back whole.
    last = [line.split("│")[-2] for line in result.stdout.splitlines() if line.count("│") > 2]
    assert "effective setting: effective.attention_backend flashinfer -> triton" in " ".join(
        " ".join(last).split()
    )
    assert "regression from run" in result.stdout
    document = json.loads(
        call_main(
            cli.main, "history", *args[:2], "--json", cwd=tmp_path, env=env, capsys=capsys
        ).stdout
    )
    (history,) = document
    (change,) = history["changes"]
    assert change["index"] == 16 and change["ci_high"] < -0.03
    first = change["differences"][0]
    assert (first["key"], first["before"], first["after"]) == (
        "effective.attention_backend",
        "flashinfer",
        "triton",
    )
    # A threshold beyond the drop passes.
    relaxed = call_main(
        cli.main,
        "history",
        *args[:2],
        "--fail-on-regression",
        "0.2",
        cwd=tmp_path,
        env=env,
        capsys=capsys,
    )
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    # Into the experiment's page in the UI, twice: the history section replaced, the rest kept.
    for _ in range(2):
        described = call_main(
            cli.main, "history", *args[:2], "--describe", cwd=tmp_path, env=env, capsys=capsys
        )
        assert described.returncode == 0, described.stdout + described.stderr
    page = TrackingStore(env["MLFLOW_TRACKING_URI"], "history").client.get_experiment_by_name(
        "history"
    )
    description = page.tags[NOTE]
    assert description.startswith("specexp runs: one per job")
    assert description.count(HISTORY_HEADING) == 1
    assert (
        "effective.attention_backend flashinfer -> triton" in description.split(HISTORY_HEADING)[1]
    )


def test_the_reference_story_replayed_finds_the_triton_regression_and_its_cause(tmp_path, capsys):
    """The story's baseline as its user ran it: the 83.9 point is a regression from 89.5,
    attributed first to the attention backend SGLang 0.5.9's own code chooses on SM 12.0
    when the command leaves it on auto - triton."""
    result = call_main(
        cli.main, "history", "--reference", "cuda13_story", "--json", cwd=tmp_path, capsys=capsys
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ((history,),) = [json.loads(result.stdout)]
    regression, recovery = history["changes"]
    assert regression["run_id"] == "cu130-baseline-triton" and regression["ci_high"] < 0
    assert round(regression["change"], 3) == round(83.9 / 89.5 - 1, 3)
    first = regression["differences"][0]
    assert (first["key"], first["before"], first["after"]) == (
        "effective.attention_backend",
        "flashinfer",
        "triton",
    )
    assert recovery["run_id"] == "cu130-baseline" and recovery["ci_low"] > 0

"""The front door with real processes: the Python API running a job silently, `specexp`
exiting 2 on a config the job refuses, the store's artifacts beside its database. (Each exit
status from both doors: tests/process/test_exit_status.py; `specexp ui` on a free port: the
getting-started transcript's test, tests/process/test_getting_started.py.)"""

from __future__ import annotations

import doctest
import os
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import specexp
from specexp import api, cli
from specexp.analysis.results import RunKind, RunStatus
from tests.conftest import TINY, run_cli, runs_in, store_env


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """A fresh directory to run in, with a private store named by MLFLOW_TRACKING_URI."""
    store = tmp_path / "store"
    store.mkdir()
    for key, value in store_env(store).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_notebook_runs_a_job_and_gets_its_typed_summary_with_nothing_printed(in_tmp, capfd):
    result = specexp.run_job(list(TINY), quiet=True)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert result.status == RunStatus.finished and result.run_id
    assert result.summary is not None and result.summary.tok_per_s.n == 2
    assert result.summary.tok_per_s.mean > 0
    # Quiet is the terminal's: the job's log has its lines.
    assert result.output_dir is not None
    log = (result.output_dir / "specexp.log").read_text()
    assert "tok/s" in log and "run 1:" in log
    # The finished run loads back, typed, from its directory and from its id.
    loaded = specexp.load(str(result.output_dir))
    assert loaded.run_id == result.run_id and loaded.kind == RunKind.job
    assert loaded.job is not None and len(loaded.job.values) == 2
    # MLFLOW_TRACKING_URI moved the store: its artifacts are beside its database.
    run = MlflowClient(os.environ["MLFLOW_TRACKING_URI"]).get_run(result.run_id)
    assert run.info.artifact_uri.startswith((in_tmp / "store" / "artifacts").as_uri())
    assert not (in_tmp / "mlruns").exists()


def test_a_job_with_no_observers_prints_writes_and_tracks_nothing(in_tmp, capfd):
    """The job as the core runs it: its events heard by no one, its typed summary returned."""
    before = {p for p in in_tmp.rglob("*")}
    result = specexp.run_job(list(TINY), observers=[])
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert result.status == RunStatus.finished
    assert result.summary is not None and result.summary.tok_per_s.n == 2
    assert [r.tok_per_s > 0 for r in result.runs if not r.warmup] == [True, True]
    assert result.output_dir is None and result.run_id is None
    assert {p for p in in_tmp.rglob("*")} == before  # no output directory, no store
    assert not MlflowClient(os.environ["MLFLOW_TRACKING_URI"]).search_experiments(
        filter_string="name = 'specexp'"
    )


def test_the_apis_examples_run():
    """The module's docstring example, as a notebook would run it."""
    failures, tried = doctest.testmod(api, optionflags=doctest.ELLIPSIS)
    assert tried and not failures


@pytest.mark.no_engine_server
def test_models_list_names_every_model_and_whether_it_is_ready(capsys):
    assert cli.main(["models", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("gemma3-270m", "tiny-pair-small", "kimi-k2.5"):
        assert name in out


@pytest.mark.no_engine_server
def test_a_config_the_job_refuses_exits_2_before_anything_is_tracked(tmp_path):
    env = store_env(tmp_path)
    result = run_cli(
        "run",
        *TINY,
        f"stack.bin_dir={tmp_path / 'nowhere'}",
        cwd=tmp_path,
        env=env,
        module="specexp.cli",
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "config error:" in result.stdout and "Traceback" not in result.stdout + result.stderr
    assert runs_in(env["MLFLOW_TRACKING_URI"]) == []


@pytest.mark.no_engine_server
def test_a_config_the_job_refuses_is_raised_by_the_api_with_why_and_nothing_printed(in_tmp, capfd):
    """hydra_app printed a refused config itself: the API now raises it with its reason,
    and the command line's error path prints it (the test above)."""
    with pytest.raises(api.NotRun) as refused:
        specexp.run_job([*TINY, f"stack.bin_dir={in_tmp / 'nowhere'}"], observers=[])
    assert refused.value.exit_status == 2 and refused.value.what == "config error"
    assert "not found or not executable" in refused.value.why
    assert capfd.readouterr() == ("", "")

"""Faults and bad input: every row of the fault table in docs/faults.md, against real processes."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from hydra.errors import HydraException
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlflow.tracking import MlflowClient
from omegaconf.errors import OmegaConfBaseException

from specexp import cli
from specexp.analysis.results import Tag
from specexp.core.durable import read_json_lines
from specexp.core.schemas.checks import ConfigError
from specexp.core.tinymodels import ensure_pair
from specexp.host import failure
from specexp.hydra_app import prepare
from specexp.output import files
from specexp.tracking.store import RunLog, TrackingStore
from tests.conftest import (
    CONFIG_DIR,
    REPO,
    SPECEXP,
    TINY,
    call_main,
    compose_job,
    compose_run,
    described,
    fake_llama_server,
    is_sweep,
    killed_with_its_servers,
    mlflow_process,
    nothing_tracked,
    run_cli,
    runs_in,
    server_pids,
    specexp_in_process,
    start_cli,
    store_env,
    sweep_parent,
)

QUICK = TINY
# For a store that is down: MLflow's client retries as specexp tells it (the same retries,
# the same warnings), without the seconds of backoff between them.
NO_BACKOFF = {"MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0", "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0"}


@pytest.mark.load_tolerant
def test_server_dying_at_start_fails_its_job_fast_and_the_sweep_goes_on(tmp_path, tracking_env):
    started = time.monotonic()
    result = specexp_in_process(
        "-m", *QUICK, "engine.extra_args=[],[--no-such-flag]", cwd=tmp_path, env=tracking_env
    )
    assert time.monotonic() - started < 120
    # The sweep goes on to its end, then exits 1 naming the job that failed.
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "1 of 2 job(s) failed: engine.extra_args=[--no-such-flag]" in result.stdout
    assert "server failed: server exited with code" in result.stdout
    runs = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    jobs = {r.data.tags.get("mlflow.runName"): r for r in runs if not is_sweep(r)}
    failed = jobs["engine.extra_args=[--no-such-flag]"]
    assert failed.info.status == "FAILED" and "no-such-flag" in failed.data.tags[Tag.failure]
    # Its baseline was measured, but its comparison cannot be made: not finished with the
    # launches it had, so that a resume measures the pair whole.
    kept = jobs["engine.extra_args=[]"]
    assert kept.info.status == "FAILED"
    assert "the other arm failed" in kept.data.tags[Tag.failure]
    names = {
        a.path
        for a in MlflowClient(tracking_env["MLFLOW_TRACKING_URI"]).list_artifacts(
            failed.info.run_id
        )
    }
    assert "server.log" in names
    parent = sweep_parent(runs)
    assert parent.data.tags[Tag.failed_jobs] == "2"  # the job that failed, and its arm


@pytest.mark.load_tolerant
def test_server_never_ready_is_a_readiness_timeout(tmp_path, tracking_env):
    result = specexp_in_process(
        *QUICK, "engine.ready_timeout_s=0.001", cwd=tmp_path, env=tracking_env
    )
    assert result.returncode == 1
    assert "server not ready after 0 s (engine.ready_timeout_s)" in result.stdout
    (run,) = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    assert run.info.status == "FAILED" and run.data.tags[Tag.failure] == "readiness timeout"


def _start_run(tmp_path, env, *overrides):
    process = start_cli(
        "run", *overrides, cwd=tmp_path, env=env, module=SPECEXP, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        records = list(Path(tmp_path).glob("outputs/*/*/requests.jsonl"))
        if records and len(records[0].read_text().splitlines()) >= 2 and server_pids():
            return process, records[0]
        time.sleep(0.2)
    process.kill()
    pytest.fail("the run did not start measuring")


@pytest.mark.load_tolerant
def test_server_killed_mid_measurement_keeps_the_records_and_fails_the_run(tmp_path, tracking_env):
    process, records = _start_run(
        tmp_path, tracking_env, *QUICK, "workload.max_tokens=64", "stats.measured_runs=200"
    )
    for pid in server_pids():
        os.kill(pid, signal.SIGKILL)
    output = process.communicate(timeout=120)[0]
    assert process.returncode == 1, output[-2000:]
    # One line names the process, how it ended and the run it ended in.
    said = [line for line in output.splitlines() if "was killed by SIGKILL during run" in line]
    assert len(said) == 1 and "llama-server (pid " in said[0], output[-3000:]
    (run,) = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    assert run.info.status == "FAILED"
    assert "was killed by SIGKILL during run" in run.data.tags[Tag.failure]
    assert "tok_per_s_mean" not in run.data.metrics  # partial data is not summarised as if complete
    kept = [json.loads(line) for line in records.read_text().splitlines()]
    assert sum(r["ok"] for r in kept) >= 2 and not kept[-1]["ok"]
    client = MlflowClient(tracking_env["MLFLOW_TRACKING_URI"])
    uploaded = Path(
        client.download_artifacts(run.info.run_id, "requests.jsonl", str(tmp_path / "dl"))
    )
    assert uploaded.read_text() == records.read_text()


@pytest.mark.load_tolerant
def test_requests_the_server_cuts_short_fail_the_run_and_keep_their_records(tmp_path, tracking_env):
    """A context smaller than the command's, slipped in behind specexp's back (an extra
    --ctx-size, which llama.cpp takes last): 256 tokens per slot for 400 new ones. Every
    request stops early; the run fails saying so, and the records keep the figures."""
    result = specexp_in_process(
        *QUICK,
        "stats.warmup_runs=0",
        "stats.measured_runs=1",
        "concurrency.streams=2",
        "workload.max_tokens=400",
        "engine.extra_args=[--ctx-size,512]",
        cwd=tmp_path,
        env=tracking_env,
    )
    assert result.returncode == 1, result.stdout[-2000:]
    (run,) = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    failure = run.data.tags[Tag.failure]
    assert run.info.status == "FAILED" and "truncated: " in failure and "of 400 tokens" in failure
    (records,) = Path(tmp_path).glob("outputs/*/*/requests.jsonl")
    kept = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(kept) == 2 and all(r["truncated"] and not r["ok"] for r in kept)
    assert all(0 < r["output_tokens"] < 400 and r["itl_s"] for r in kept)


@pytest.mark.load_tolerant
def test_server_stalled_mid_stream_is_ended_by_the_stall_timeout(tmp_path, tracking_env):
    process, _ = _start_run(
        tmp_path,
        tracking_env,
        *QUICK,
        "stats.measured_runs=200",
        "workload.stall_timeout_s=2",
    )
    stopped = server_pids()
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)  # connection open, no tokens
    output = process.communicate(timeout=120)[0]
    assert process.returncode == 1
    said = [line for line in output.splitlines() if "stopped answering, its health" in line]
    # Stopped mid-stream or between requests: no data, or no response headers.
    assert said and "StallError: no " in said[0], output
    assert "for 2 s (workload.stall_timeout_s)" in said[0]
    assert server_pids() == set()  # the stopped server was woken and stopped


@pytest.mark.no_engine_server
def test_a_server_alive_but_silent_is_named_within_the_stall_timeout(tmp_path):
    """Issue 60: after SIGSTOP, 244 s passed before "stopped answering" against a 120 s
    stall timeout: the stalled request's 120 s, then the run's closing read of the server's
    counters another 120 s. Now nothing of the run waits on a server that let one request or
    probe wait the stall timeout: it is named that timeout after it went quiet, plus the
    health probe's 2 s (the test server paces 50 events a second: stopped mid-stream or
    between requests; before, 2 stall timeouts at least)."""
    stall_s = 10
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "20")
    process = start_cli(
        "run",
        *TINY,
        f"stack.bin_dir={bin_dir}",
        "stats.measured_runs=1000",
        f"workload.stall_timeout_s={stall_s}",
        "tracking=off",
        cwd=tmp_path,
        module=SPECEXP,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("run 1:"):  # measuring
            break
    for pid in server_pids():
        os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    named = None
    for line in process.stdout:
        if "stopped answering, its health endpoint too" in line:
            named = time.monotonic() - stopped
            break
    output = process.communicate(timeout=120)[0]
    assert process.returncode == failure.RUN_FAILED, output[-3000:]
    # Under two timeouts, which the old way took at the least: the rest is slack for a busy machine.
    assert named is not None and named < 2 * stall_s, (named, output[-3000:])
    assert server_pids() == set()  # the stopped server was woken and stopped


@pytest.mark.load_tolerant
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_stops_the_server_and_ends_with_one_line(tmp_path, tracking_env, signum):
    """Ctrl-C or SIGTERM mid-run: the server stopped, the run KILLED, the records kept - and
    one line, no traceback, the shell's exit status (130, 143)."""
    process, records = _start_run(tmp_path, tracking_env, *QUICK, "stats.measured_runs=200")
    process.send_signal(signum)
    output = process.communicate(timeout=120)[0]
    assert process.returncode == 128 + signum, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    (line,) = [line for line in output.splitlines() if "interrupted" in line]
    assert f"interrupted ({signal.Signals(signum).name})" in line
    assert server_pids() == set()
    (run,) = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    assert run.info.status == "KILLED"
    assert len(records.read_text().splitlines()) >= 2


@pytest.mark.no_engine_server
def test_missing_stack_interpreter_is_refused_before_launch(tmp_path, tracking_env):
    result = specexp_in_process(
        "engine=sglang", "model=kimi-k2.5", "stack=cu130", cwd=tmp_path, env=tracking_env
    )
    assert result.returncode == 2
    assert (
        "/opt/specexp/cu130/bin/python (stack cu130) not found or not executable" in result.stdout
    )
    assert nothing_tracked(tmp_path)


def later_store(tmp_path: Path) -> str:
    """The URI of a store the upload comes to later, empty (store_env's copy: no schema
    migrations to wait for, which a store made here would run)."""
    (tmp_path / "later").mkdir()
    return store_env(tmp_path / "later")["MLFLOW_TRACKING_URI"]


def upload_the_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, Any]:
    """`python -m specexp.upload` (its main, in this process) on the one journaled job under
    ``tmp_path``, into a new store: its URI and the finished run."""
    (journal,) = tmp_path.glob("outputs/*/*/mlflow_offline.json")
    uri = later_store(tmp_path)
    upload = call_main(
        cli.main, "upload", str(journal.parent), "--tracking-uri", uri, cwd=tmp_path, capsys=capsys
    )
    assert upload.returncode == 0, upload.stdout + upload.stderr
    (run,) = runs_in(uri)
    assert run.info.status == "FINISHED" and run.data.metrics["tok_per_s_mean"] > 0
    return uri, run


@pytest.mark.load_tolerant
def test_a_store_that_dies_mid_run_is_replaced_by_the_journal_and_the_run_completed_later(
    tmp_path, capsys
):
    """A real `mlflow server` killed after the run's first measured runs: measuring goes on
    into the journal, it says so, and specexp.upload completes the same run - every
    measured run's metrics and the summary in the end, nothing lost. On a test server paced
    at about 1 s a run, so that the store is down well before the run's last."""
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "30")
    store = tmp_path / "store"
    store.mkdir()
    backend = store_env(store)["MLFLOW_TRACKING_URI"]  # migrated: the server starts sooner
    with mlflow_process(
        "server",
        "--backend-store-uri",
        backend,
        "--default-artifact-root",
        str(store / "artifacts"),
        "--no-serve-artifacts",
        "--workers",
        "1",
        cwd=store,
    ) as url:
        process = start_cli(
            "run",
            *QUICK,
            f"stack.bin_dir={bin_dir}",
            "stats.measured_runs=8",
            cwd=tmp_path,
            env={**NO_BACKOFF, "MLFLOW_TRACKING_URI": url},
            module=SPECEXP,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while not [r for r in runs_in(backend) if "tok_per_s" in r.data.metrics]:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
    output = process.communicate(timeout=300)[0]  # the server is gone from here on
    assert process.returncode == failure.NOT_IN_STORE, output[-3000:]  # upload later
    assert "MLflow store failed mid-run" in output, output[-3000:]
    (journal,) = tmp_path.glob("outputs/*/*/mlflow_offline.json")
    assert "continues" in json.loads(journal.read_text())
    upload = call_main(
        cli.main,
        "upload",
        str(journal.parent),
        "--tracking-uri",
        backend,
        cwd=tmp_path,
        capsys=capsys,
    )
    assert upload.returncode == 0, upload.stdout + upload.stderr
    (run,) = runs_in(backend)
    # The job's process was gone: the upload's first step ended the run KILLED, abandoned;
    # its journal, uploaded, takes that back.
    assert run.info.status == "FINISHED" and Tag.failure not in run.data.tags
    assert run.data.metrics["measured_runs"] == 8 and "tok_per_s_mean" in run.data.metrics
    history = MlflowClient(backend).get_metric_history(run.info.run_id, "tok_per_s")
    assert sorted(m.step for m in history) == list(range(8))


@pytest.mark.load_tolerant
def test_a_node_without_mlflow_measures_into_the_journal_and_uploads_later(tmp_path, capsys):
    """MLflow cannot be imported at all (a GPU node it was not carried to): the run measures
    all the same, journals to its output directory, and specexp.upload logs it where MLflow is."""
    blocker = tmp_path / "no_mlflow"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['mlflow'] = None\n")
    path = os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH")]))
    result = run_cli(*QUICK, cwd=tmp_path, env={"PYTHONPATH": path})
    assert result.returncode == failure.NOT_IN_STORE, result.stdout[-2000:] + result.stderr[-2000:]
    assert "MLflow is not installed here" in result.stdout
    upload_the_journal(tmp_path, capsys)


@pytest.mark.load_tolerant
def test_a_dead_proxy_in_the_environment_does_not_stand_between_specexp_and_its_server(
    tmp_path, tracking_env
):
    """Cluster nodes set proxies: readiness checks, /props and the client still reach the
    server specexp started on 127.0.0.1 directly."""
    dead = "http://127.0.0.1:9"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    proxies = {n: dead for name in names for n in (name, name.lower())}
    result = specexp_in_process(*QUICK, cwd=tmp_path, env={**tracking_env, **proxies})
    assert result.returncode == 0, result.stdout[-2000:]
    (run,) = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    assert run.info.status == "FINISHED"
    assert run.data.tags["engaged.resolution"] == "engaged"  # /props, read through urllib


@pytest.mark.load_tolerant
def test_an_unreachable_store_keeps_measurements_and_no_credentials_anywhere(tmp_path, capsys):
    """A store that cannot be reached: the run measures into its journal and says how to
    upload it, and the upload logs its records and server log. Passwords inside URLs - in
    inherited variables, in config values, in the tracking URI - appear nowhere: not in the
    output, the job's files, the offline journal or, after the upload, the MLflow store."""
    secrets = ("s3cretpw", "hunter2", "pw-tracking", "pw-mirror")
    result = specexp_in_process(
        *QUICK,
        "tracking.uri=http://carol:pw-tracking@127.0.0.1:9",
        "+stack.env.MIRROR=https://dave:pw-mirror@mirror.example/simple",
        cwd=tmp_path,
        env={
            **NO_BACKOFF,
            "DATABASE_URL": "postgres://alice:s3cretpw@db/x",
            "HTTP_PROXY": "http://bob:hunter2@127.0.0.1:9",
        },
    )
    assert result.returncode == failure.NOT_IN_STORE, result.stdout[-2000:]
    assert (
        "MLflow store unreachable" in result.stdout and "python -m specexp.upload" in result.stdout
    )
    assert "alice:***@db" in result.stdout or "carol:***@" in result.stdout
    written = [result.stdout, result.stderr] + [
        p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()
    ]
    assert not [s for s in secrets for text in written if s in text]
    uri, run = upload_the_journal(tmp_path, capsys)
    assert {"requests.jsonl", "server.log"} <= {
        a.path for a in MlflowClient(uri).list_artifacts(run.info.run_id)
    }
    stored = json.dumps([run.data.params, run.data.tags])
    assert "carol:***@127.0.0.1:9" in stored and not any(s in stored for s in secrets)
    # The journal kept no credentials, so an upload has to be told the store.
    (uploaded,) = tmp_path.glob("outputs/*/*/mlflow_offline.uploaded.json")
    uploaded.rename(uploaded.with_name("mlflow_offline.json"))
    again = call_main(cli.main, "upload", str(uploaded.parent), cwd=tmp_path, capsys=capsys)
    assert again.returncode == 2 and "--tracking-uri" in again.stdout


@pytest.mark.load_tolerant
def test_secret_looking_values_are_redacted_everywhere(tmp_path, tracking_env):
    result = specexp_in_process(
        *QUICK,
        "+stack.env.HF_TOKEN=hf_supersecret",
        "+engine.env.MY_API_KEY=sk-supersecret",
        cwd=tmp_path,
        env={**tracking_env, "OTHER_PASSWORD": "pw-supersecret"},
    )
    assert result.returncode == 0, result.stdout[-2000:]
    (run,) = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    assert (
        run.data.params["stack.env.HF_TOKEN"] == "***"
        and run.data.params["engine.env.MY_API_KEY"] == "***"
    )
    assert run.data.params["engine.host"] == "127.0.0.1"
    client = MlflowClient(tracking_env["MLFLOW_TRACKING_URI"])
    for name in ("config.yaml", "command.txt", "environment.json"):
        text = Path(
            client.download_artifacts(run.info.run_id, name, str(tmp_path / "dl"))
        ).read_text()
        assert "supersecret" not in text, name
    assert "supersecret" not in result.stdout


# The config surface, fuzzed: any composition either runs through validation or ends in a
# clear error - never another exception, and (in-process) nothing is launched.
GROUPS = {
    group.name: sorted(p.stem for p in group.glob("*.yaml"))
    for group in Path(CONFIG_DIR).iterdir()
    if any(group.glob("*.yaml")) and group.name not in ("sweep", "case", "cpu_case", "reference")
}
FIELDS = [
    "engine.tensor_parallel_size",
    "engine.port",
    "speculative.num_steps",
    "speculative.num_draft_tokens",
    "workload.max_tokens",
    "stats.measured_runs",
    "stats.warmup_runs",
    "stats.confidence",
    "concurrency.streams",
    "attention_backend.name",
    "speculative.method",
    "multirun.order",
    "model.generate.divergence",
    "engine.gpus",
    "host.gpus",
    "host.lease_wait_s",
]
VALUES = st.one_of(
    st.integers(-5, 100000),
    st.floats(-2, 2, allow_nan=False),
    st.sampled_from(["", "abc", "null", "true", "[1,2]", "flashinfer", "none", "eagle3"]),
)


@pytest.mark.no_engine_server
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    choices=st.fixed_dictionaries({g: st.sampled_from(options) for g, options in GROUPS.items()}),
    fields=st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=3),
)
def test_fuzzed_compositions_end_in_a_clear_error_or_validate(choices, fields):
    before = server_pids()
    overrides = [f"{g}={o}" for g, o in choices.items()] + [f"{k}={v}" for k, v in fields.items()]
    try:
        cfg = compose_run(*overrides)
        prepare(cfg)
    except ConfigError as error:
        assert str(error) and "\n" not in str(error)
    except (
        HydraException,
        OmegaConfBaseException,
    ) as error:  # type errors, unparsable values: Hydra's own message
        assert str(error)
    except AssertionError as error:
        # OmegaConf's own assertion when an override sets a field under a null node (e.g.
        # model.generate.divergence on a model that is not generated), raised while Hydra
        # composes, before specexp sees the config.
        assert str(error) == "Unexpected type for root: NoneType"
    assert server_pids() == before


# Issue 45's fault matrix: each test names the row of docs/notes/faults.md it checks.

STORE_USER = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from specexp.tracking.store import TrackingStore\n"
    "print('at the gate', flush=True)\n"
    "go = Path(sys.argv[2])\n"
    "while not go.exists():\n"
    "    time.sleep(0.005)\n"
    "store = TrackingStore(sys.argv[1], 'specexp')\n"
    "run = store.start_run(sys.argv[3], {})\n"
    "run.log_metrics({'tok_per_s': 1.0})\n"
    "run.end()\n"
)


@pytest.mark.no_engine_server
def test_two_processes_starting_on_one_new_sqlite_store_both_work(tmp_path):
    """Issue 45: two sweeps started at once on a new SQLite store both crashed in MLflow's
    schema migration and broke the store for good. Two processes, released together, each
    open the new store, create the experiment and log a run: both succeed, and the store
    holds both runs. The gate opens once both say they wait at it, their imports done, so
    that they open the store within milliseconds of each other (without the lock in
    specexp.tracking.address.creating, one of them fails)."""
    uri = f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}"
    go = tmp_path / "go"
    users = [
        subprocess.Popen(
            [sys.executable, "-c", STORE_USER, uri, str(go), f"run{i}"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_DISABLE_TELEMETRY": "true"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    for user in users:
        assert user.stdout is not None
        assert user.stdout.readline() == "at the gate\n"
    go.touch()
    outputs = [u.communicate(timeout=300)[0] for u in users]
    assert [u.returncode for u in users] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    runs = runs_in(uri)
    assert sorted(r.info.run_name for r in runs) == ["run0", "run1"]
    assert all(r.info.status == "FINISHED" for r in runs)


def files_under(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def statuses(uri: str) -> dict[str, list[str]]:
    """Each run name's statuses, sorted."""
    found: dict[str, list[str]] = {}
    for run in runs_in(uri):
        found.setdefault(run.info.run_name, []).append(run.info.status)
    return {name: sorted(s) for name, s in found.items()}


@pytest.mark.load_tolerant
def test_a_sweep_killed_mid_job_resumes_without_touching_finished_work(tmp_path, tracking_env):
    """Issue 45: a sweep killed with SIGKILL and resumed into the same directory wrote its
    first resumed job into finished job 0's folder (config, command, environment replaced,
    requests.jsonl appended), and left the parent and the job in flight RUNNING for good.
    Killed while job 1 measures: the resumed sweep leaves job 0's folder byte-identical, keeps
    job 1's first attempt whole in attempt-1/, ends the killed runs KILLED, runs each
    unfinished job once, and leaves no run RUNNING and no server behind."""
    uri = tracking_env["MLFLOW_TRACKING_URI"]
    sweep = (
        "-m",
        *TINY,
        "stats.measured_runs=6",
        "multirun.order=blocked",
        "replicate=0,1,2",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    process = start_cli(*sweep, cwd=tmp_path, env=tracking_env, stderr=subprocess.STDOUT)
    in_flight = tmp_path / "sweep" / "1" / "requests.jsonl"
    deadline = time.monotonic() + 300
    while not (in_flight.exists() and in_flight.read_text().count("\n") >= 1):
        assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
        time.sleep(0.1)
    killed_with_its_servers(process)
    assert not (left := server_pids()), described(left)
    # Taken once the server is gone: the sweep's shared server writes to job 0's server.log
    # until it exits, and its last lines come as it dies.
    finished = files_under(tmp_path / "sweep" / "0")
    earlier_attempt = in_flight.read_bytes()
    assert statuses(uri)["replicate=0"] == ["FINISHED"]

    resumed = specexp_in_process(*sweep, cwd=tmp_path, env=tracking_env)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert files_under(tmp_path / "sweep" / "0") == finished
    assert (
        tmp_path / "sweep" / "1" / "attempt-1" / "requests.jsonl"
    ).read_bytes() == earlier_attempt
    for job in ("1", "2"):
        lines = (tmp_path / "sweep" / job / "requests.jsonl").read_text().splitlines()
        assert len(lines) == 6 and all(json.loads(line)["ok"] for line in lines)
    assert statuses(uri) == {
        "sweep (3 jobs)": ["FINISHED"],  # one parent, resumed (issue 60)
        "replicate=0": ["FINISHED"],
        "replicate=1": ["FINISHED", "KILLED"],
        "replicate=2": ["FINISHED"],
    }
    assert server_pids() == set()


def undecidable_aa(bin_dir: Path, sweep_dir: Path) -> tuple[str, ...]:
    """`python -m specexp -m`'s arguments for an A/A comparison on test servers, measured
    launch by launch until decided, which it cannot be (a threshold of 0.01%, read at
    99.999%): its four launches each, two looks (after launches 3 and 4)."""
    return (
        "-m",
        *TINY,
        f"stack.bin_dir={bin_dir}",
        "replicate=0,1",
        "multirun.reuse_servers=false",
        "multirun.baseline='replicate=0'",
        "stats.sequential.max_launches=4",
        "stats.threshold=0.0001",
        "stats.confidence=0.99999",
        f"hydra.sweep.dir={sweep_dir}",
    )


@pytest.mark.no_engine_server
def test_a_sequential_sweep_killed_and_resumed_keeps_the_launches_it_completed(
    tmp_path, tracking_env
):
    """Issue 52, item 3: a sweep in the default order (comparisons measured until decided)
    killed with SIGKILL and resumed measured every launch again. Killed after its first
    look, on test servers: the resumed sweep takes back each launch the killed one
    completed (attempt-1/ keeps the killed attempt's files, run.json among them), prints
    the killed sweep's looks again as they were, starts a server only for the launches
    missing, and ends with every launch in each job's files, run and report. The A/A cannot
    be decided (a threshold of 0.01%, read at 99.999%): it runs its four launches."""
    sweep_dir = tmp_path / "sweep"
    sweep = undecidable_aa(fake_llama_server(tmp_path, "--itl-ms", "2"), sweep_dir)
    env = {**tracking_env, "PYTHONUNBUFFERED": "1"}
    killed_output = tmp_path / "killed.txt"
    with killed_output.open("w") as out:
        process = start_cli(
            "sweep",
            *sweep[1:],
            cwd=tmp_path,
            env=env,
            module=SPECEXP,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 300
        while "look 1:" not in killed_output.read_text():
            assert process.poll() is None and time.monotonic() < deadline, (
                killed_output.read_text()[-3000:]
            )
            time.sleep(0.05)
        killed_with_its_servers(process)
    jobs = [sweep_dir / "0", sweep_dir / "1"]
    completed = [(job / "launches.jsonl").read_text().splitlines(keepends=True) for job in jobs]
    assert all(len(lines) >= 3 for lines in completed)  # the first look's launches at least

    resumed = specexp_in_process(*sweep, cwd=tmp_path, env=env)
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output[-4000:]
    for job, lines in zip(jobs, completed, strict=True):
        aside = job / "attempt-1"
        assert (aside / "launches.jsonl").read_text().splitlines(keepends=True) == lines
        assert json.loads((aside / "run.json").read_text())["run_id"]
        now = (job / "launches.jsonl").read_text().splitlines(keepends=True)
        assert len(now) == 4 and now[: len(lines)] == lines  # taken back as they were
        requests = [json.loads(line) for line in (job / "requests.jsonl").read_text().splitlines()]
        assert sorted({r["launch"] for r in requests}) == [0, 1, 2, 3]
        earlier = [json.loads(line) for line in (aside / "requests.jsonl").read_text().splitlines()]
        assert [r for r in requests if r["launch"] < len(lines)] == [
            r for r in earlier if r["launch"] < len(lines)
        ]
    assert output.count("server ready") == 8 - sum(map(len, completed))
    assert output.count("taken back from") == 2 and "attempt-1" in output
    looks = [line for line in killed_output.read_text().splitlines() if line.startswith("look ")]
    assert [line for line in output.splitlines() if line.startswith("look ")][: len(looks)] == looks

    uri = tracking_env["MLFLOW_TRACKING_URI"]
    runs = runs_in(uri)
    parent = [r for r in runs if is_sweep(r) and r.info.status == "FINISHED"][0]
    report = json.loads(
        Path(
            MlflowClient(uri).download_artifacts(
                parent.info.run_id, "sweep_report/sweep_report.json", str(tmp_path / "report")
            )
        ).read_text()
    )
    (sequence,) = report["sequences"]
    assert len(sequence["record"]["looks"]) == 2  # after launches 3 and 4 of each arm
    assert sequence["record"]["stop"] == "launch budget spent"
    (comparison,) = report["comparisons"]
    assert any(
        "measured until decided: 2 look(s) at 4+4" in n["message"] for n in comparison["notes"]
    )
    finished = [r for r in runs if not is_sweep(r) and r.info.status == "FINISHED"]
    assert len(finished) == 2 and all(r.data.metrics["launches"] == 4 for r in finished)
    assert server_pids() == set()


def down(*args: Any, **kwargs: Any) -> None:
    raise ConnectionError("Connection refused: the tracking server is down")


def store_down_at(step: str, patch: pytest.MonkeyPatch) -> None:
    """The store failing at the report's first read of job prompts (the report's alone), or
    at the first job's summary (the rest of that job goes to its journal)."""
    if step == "report":
        patch.setattr(TrackingStore, "job_prompts", down)
        return
    logged, failed = RunLog.log_metrics, list[dict]()

    def summary_down(self: RunLog, metrics: dict, *args: Any, **kwargs: Any) -> Any:
        if "tok_per_s_mean" in metrics and not failed:
            failed.append(metrics)
            down()
        return logged(self, metrics, *args, **kwargs)

    patch.setattr(RunLog, "log_metrics", summary_down)


@pytest.mark.load_tolerant
@pytest.mark.parametrize("step", ["report", "job"])
def test_a_sweeps_report_survives_a_store_down_at_its_end(tmp_path, tracking_env, step, capsys):
    """Issue 45: the store down when a sweep ends gave ~60 lines of traceback, exit 1 and a
    parent RUNNING with no report, which came back only by re-running the whole sweep. Now
    one line says so and gives the upload command, the report is journaled beside the jobs,
    and `specexp.upload` publishes it under the same parent, which it ends. Issue 52: that
    sweep exited 0, as did one whose job's record went to its journal (the store down at its
    summary); a script never learned to upload. Now both exit 75, the upload command last."""
    uri = tracking_env["MLFLOW_TRACKING_URI"]
    sweep_dir = tmp_path / "sweep"
    with pytest.MonkeyPatch.context() as patch:
        store_down_at(step, patch)
        result = specexp_in_process(
            "-m",
            *TINY,
            "replicate=0,1",
            f"hydra.sweep.dir={sweep_dir}",
            cwd=tmp_path,
            env=tracking_env,
        )
    output = result.stdout + result.stderr
    assert result.returncode == failure.NOT_IN_STORE, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert output.splitlines()[-1].split() == [
        *"python -m specexp.upload".split(),
        str(sweep_dir),
        "[--tracking-uri",
        "URI]",
    ]
    name = {"report": "mlflow_offline_report.json", "job": "mlflow_offline.json"}[step]
    (journal,) = sweep_dir.rglob(name)
    if step == "report":
        (line,) = [line for line in output.splitlines() if "failed at the sweep's end" in line]
        assert "ConnectionError: Connection refused" in line
        (parent,) = [r for r in runs_in(uri) if is_sweep(r)]
        assert Tag.failed_jobs not in parent.data.tags

    upload = call_main(
        cli.main, "upload", str(sweep_dir), cwd=tmp_path, env=tracking_env, capsys=capsys
    )
    assert upload.returncode == 0, upload.stdout + upload.stderr
    runs = runs_in(uri)
    (published,) = [r for r in runs if is_sweep(r)]
    assert published.info.status == "FINISHED"
    assert published.data.tags[Tag.failed_jobs] == "0"
    assert "replicate" in published.data.tags["mlflow.note.content"]
    assert sorted(r.info.status for r in runs if not is_sweep(r)) == ["FINISHED", "FINISHED"]
    assert journal.with_name(name.replace(".json", ".uploaded.json")).exists()
    if step == "report":
        assert f"on run {published.info.run_id}" in upload.stdout


@pytest.mark.no_engine_server
def test_a_full_disk_in_a_sequential_sweep_loses_no_comparison(tmp_path, tracking_env):
    """Issue 60: the first arm of a comparison measured until decided hit ENOSPC; the second
    ran one launch and was ended FINISHED; the resumed sweep skipped it, measured the first
    arm whole, reported over 0 comparisons and exited 0. Now the second arm ends FAILED
    (its comparison stopped), the sweep exits 1, and the resumed sweep measures the pair
    again and makes the comparison."""
    uri = tracking_env["MLFLOW_TRACKING_URI"]
    sweep_dir = tmp_path / "sweep"
    sweep = undecidable_aa(fake_llama_server(tmp_path, "--itl-ms", "1"), sweep_dir)
    appended = files.append_whole
    full: list[Path] = []

    def disk_full_once(path: Path, lines: Any) -> None:
        if path.name == "requests.jsonl" and not full:
            full.append(path)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        appended(path, lines)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "append_whole", disk_full_once)
        first = specexp_in_process(*sweep, cwd=tmp_path, env=tracking_env)
    assert first.returncode == failure.RUN_FAILED, first.stdout[-3000:]
    assert (
        "1 comparison(s) stopped without a verdict, an arm failed: replicate=1 vs replicate=0"
        in first.stdout
    )
    assert full and statuses(uri)["replicate=0"] == ["FAILED"], first.stdout + first.stderr
    assert statuses(uri)["replicate=1"] == ["FAILED"], first.stdout  # not FINISHED with one launch

    resumed = specexp_in_process(*sweep, cwd=tmp_path, env=tracking_env)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "over 1 comparison(s)" in resumed.stdout, resumed.stdout[-3000:]
    finished = [r for r in runs_in(uri) if not is_sweep(r) and r.info.status == "FINISHED"]
    assert sorted(r.data.tags["replicate"] for r in finished) == ["0", "1"]
    assert all(r.data.metrics["launches"] == 4 for r in finished)


def store_contents(uri: str) -> list[tuple]:
    """Every run of the store - its status, tags and each metric's whole history - to tell
    that a command changed nothing."""
    client = MlflowClient(uri)
    return sorted(
        (
            run.info.run_id,
            run.info.status,
            sorted(run.data.tags.items()),
            sorted(
                (
                    key,
                    sorted(
                        (m.step, m.timestamp, m.value)
                        for m in client.get_metric_history(run.info.run_id, key)
                    ),
                )
                for key in run.data.metrics
            ),
        )
        for run in runs_in(uri)
    )


@pytest.mark.no_engine_server
def test_a_journal_already_uploaded_changes_nothing_and_a_sweep_keeps_one_parent(
    tmp_path, tracking_env, capsys
):
    """Issue 60: a copy of an uploaded mlflow_offline.json left in a sweep's folder was taken
    as new: the resumed sweep said the store had failed during its jobs (it had not), exited
    75 and left a new parent RUNNING; each publication added a parent and logged the
    comparison's metrics again. Now an upload of it says it was uploaded and changes nothing,
    and the sweep resumed in its folder publishes its report on its one parent, each metric
    point once, and exits 0."""
    uri = tracking_env["MLFLOW_TRACKING_URI"]
    sweep_dir = tmp_path / "sweep"
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "1")
    sweep = (
        "-m",
        *TINY,
        f"stack.bin_dir={bin_dir}",
        "replicate=0,1",
        f"hydra.sweep.dir={sweep_dir}",
    )
    with pytest.MonkeyPatch.context() as patch:
        store_down_at("job", patch)  # the first job's record goes on in its journal
        first = specexp_in_process(*sweep, cwd=tmp_path, env=tracking_env)
    assert first.returncode == failure.NOT_IN_STORE, first.stdout[-3000:]
    upload = call_main(
        cli.main, "upload", str(sweep_dir), cwd=tmp_path, env=tracking_env, capsys=capsys
    )
    assert upload.returncode == 0, upload.stdout + upload.stderr
    (done,) = sweep_dir.rglob("mlflow_offline.uploaded.json")
    stray = Path(shutil.copy(done, done.with_name("mlflow_offline.json")))
    published = store_contents(uri)

    again = call_main(
        cli.main, "upload", str(sweep_dir), cwd=tmp_path, env=tracking_env, capsys=capsys
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert (
        f"{stray}: already uploaded, as run" in again.stdout and "nothing changed" in again.stdout
    )
    assert store_contents(uri) == published and stray.exists()

    for _ in range(2):  # resumed twice: its report published twice more
        resumed = specexp_in_process(*sweep, cwd=tmp_path, env=tracking_env)
        output = resumed.stdout + resumed.stderr
        assert resumed.returncode == 0, output[-3000:]
        assert "in journals" not in output and "not in the MLflow store" not in output
    runs = runs_in(uri)
    (parent,) = [r for r in runs if is_sweep(r)]
    assert parent.info.status == "FINISHED"
    client = MlflowClient(uri)
    compared = [r for r in runs if Tag.verdict in r.data.tags and "speedup_pct" in r.data.metrics]
    assert compared
    for run in compared:
        assert len(client.get_metric_history(run.info.run_id, "speedup_pct")) == 1


def full_disk_at(size: int) -> None:
    """In the child before exec: every write past ``size`` bytes of a file fails (EFBIG), as
    a full disk fails it with ENOSPC - on every writer, the server's log included."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


@pytest.mark.no_engine_server
def test_a_disk_that_fills_mid_run_loses_nothing_written_and_ends_the_run(tmp_path, capsys):
    """Issue 45: the disk filling during a run left the journal at 0 bytes, requests.jsonl
    cut mid-line, the run RUNNING and three chained tracebacks; upload then crashed on the
    journal. Files past 32 kB cannot grow here (the journal and the requests cross it
    mid-run; the fake llama-server writes no log, which would cross it first): the run fails
    with one line and exit 74 (EX_IOERR), every file holds whole records, and the upload
    ends the run FAILED with every request that was written."""
    job = compose_job(*TINY)
    assert job.config.model.generate is not None
    ensure_pair(job.config.model.generate, job.engine.model_format)  # not made under the limit
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "1")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specexp",
            *TINY,
            f"stack.bin_dir={bin_dir}",
            "stats.measured_runs=100",
        ],
        cwd=tmp_path,
        env={
            **os.environ,
            **NO_BACKOFF,
            "MLFLOW_TRACKING_URI": "http://127.0.0.1:9",
            "MLFLOW_DISABLE_TELEMETRY": "true",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: full_disk_at(32_000),
    )
    output = process.communicate(timeout=600)[0]
    assert process.returncode == failure.DISK, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "File too large" in output
    (job_dir,) = tmp_path.glob("outputs/*/*")
    requests = read_json_lines(job_dir / "requests.jsonl")
    assert not requests.torn and len(requests.records) >= 2
    journal = json.loads((job_dir / "mlflow_offline.json").read_text())  # whole
    assert journal["calls"]
    uri = later_store(tmp_path)
    upload = call_main(
        cli.main, "upload", str(job_dir), "--tracking-uri", uri, cwd=tmp_path, capsys=capsys
    )
    assert upload.returncode == 0, upload.stdout + upload.stderr
    (run,) = runs_in(uri)
    assert run.info.status == "FAILED"
    stored = Path(
        MlflowClient(uri).download_artifacts(
            run.info.run_id, "requests.jsonl", str(tmp_path / "dl")
        )
    )
    assert stored.read_bytes() == (job_dir / "requests.jsonl").read_bytes()
    assert server_pids() == set()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real filesystem of 8 MiB (tmpfs), unmounted after; mounting it needs root, as on a
    CI machine: elsewhere the test is skipped, saying why."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)],
            capture_output=True,
            text=True,
        )
        if os.geteuid() == 0 and shutil.which("mount")
        else None
    )
    if mounted is None or mounted.returncode:
        pytest.skip(
            "a small real filesystem needs `mount -t tmpfs` as root"
            + (f": {mounted.stderr.strip()}" if mounted else "")
        )
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(path: Path) -> None:
    """Fill ``path``'s filesystem to its last block."""
    with path.open("wb", buffering=0) as filler:
        for chunk in (1 << 20, 1 << 12):
            with contextlib.suppress(OSError):
                while True:
                    filler.write(bytes(chunk))


@pytest.mark.no_engine_server
def test_a_real_disk_filling_mid_run_ends_it_in_one_line_and_loses_no_run_shown(
    tmp_path, small_disk, capsys
):
    """Issue 52: a 40 MB tmpfs holding the run and its SQLite store, filled after the
    warm-up's record, gave 799 lines with 38 tracebacks (the journal, the log writers, the
    console's log file in turn), a run RUNNING for good, no journal, and run 0 shown on the
    screen but not in requests.jsonl. Now: one line naming the file and the space it needed,
    exit 74, every run shown kept whole, and the run ended FAILED - in the store, or by the
    upload of its journal once there is room."""
    job = compose_job(*TINY)
    assert job.config.model.generate is not None
    ensure_pair(job.config.model.generate, job.engine.model_format)  # not made on the disk
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "1")
    uri = store_env(small_disk)["MLFLOW_TRACKING_URI"]  # on the disk, made before it fills
    process = start_cli(
        "run",
        *TINY,
        f"stack.bin_dir={bin_dir}",
        "stats.warmup_runs=1",
        "stats.measured_runs=300",
        cwd=small_disk,
        env={"MLFLOW_TRACKING_URI": uri},
        module=SPECEXP,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 300
    while not any(p.stat().st_size for p in small_disk.glob("outputs/*/*/requests.jsonl")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    fill(small_disk / "filler")
    output = process.communicate(timeout=300)[0]
    assert process.returncode == failure.DISK, output[-3000:]
    assert "Traceback" not in output and "Logging error" not in output, output[-3000:]
    (line,) = [line for line in output.splitlines() if "disk full:" in line]
    assert str(small_disk) in line and "needed" in line, line
    assert len(output.splitlines()) < 20, output
    (job_dir,) = small_disk.glob("outputs/*/*")
    requests = read_json_lines(job_dir / "requests.jsonl")
    shown = {int(n) for n in re.findall(r"^run (\d+):", output, re.MULTILINE)}
    assert not requests.torn and shown
    assert shown <= {r["run"] for r in requests.records if not r["warmup"]}
    (small_disk / "filler").unlink()  # room again
    journal = job_dir / "mlflow_offline.json"
    if journal.exists():  # the store failed before the journal's write: the next command
        upload = call_main(cli.main, "upload", str(job_dir), cwd=small_disk, capsys=capsys)
        assert upload.returncode == 0, upload.stdout + upload.stderr
    (run,) = runs_in(uri)
    assert run.info.status == "FAILED" and "disk full:" in run.data.tags[Tag.failure]
    assert server_pids() == set()


@pytest.mark.no_engine_server
@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_a_malformed_tracking_uri_is_refused_before_anything_runs(tmp_path, sweep):
    """Issue 45: a malformed tracking URI was taken for a store that is down: the run went
    on into a journal, exit 0, and the typo surfaced only at upload, as a traceback."""
    result = specexp_in_process(
        *(["-m", "replicate=0,1"] if sweep else []),
        *TINY,
        "tracking.uri=htp://127.0.0.1:5000",
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "no MLflow store has the scheme 'htp'" in result.stdout
    assert not list(tmp_path.rglob("requests.jsonl")) and server_pids() == set()


@pytest.mark.load_tolerant
@pytest.mark.parametrize("step", ["before-launch", "warm-up"])
def test_a_run_killed_before_it_measures_is_ended_killed_by_the_next_command(
    tmp_path, tracking_env, step
):
    """A run killed with SIGKILL (nothing of it can end its run) as soon as its run exists
    (before its server is up), or once its server runs and its warm-ups go on: the server
    goes with it, and the next specexp command ends the abandoned run KILLED, saying why."""
    uri = tracking_env["MLFLOW_TRACKING_URI"]
    process = start_cli(
        # Warm-ups enough to outlast the wait below on a quiet machine (20 took under 2 s).
        "run",
        *TINY,
        "stats.warmup_runs=500",
        cwd=tmp_path,
        env=tracking_env,
        module=SPECEXP,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 180
    while not (
        [r for r in runs_in(uri) if r.info.status == "RUNNING"]
        and (step == "before-launch" or server_pids())
    ):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    if step == "warm-up":
        time.sleep(2)  # into its warm-up runs
    killed_with_its_servers(process)
    assert not (left := server_pids()), described(left)
    (killed,) = runs_in(uri)
    assert killed.info.status == "RUNNING"  # nothing of it could end it
    written = [read_json_lines(path) for path in tmp_path.rglob("requests.jsonl")]
    assert all(r["warmup"] for w in written for r in w.records)  # killed before it measured
    assert not any(w.torn for w in written)
    result = specexp_in_process(*TINY, cwd=tmp_path, env=tracking_env)
    assert result.returncode == 0, result.stdout[-2000:]
    runs = {r.info.run_id: r for r in runs_in(uri)}
    assert runs[killed.info.run_id].info.status == "KILLED"
    assert "abandoned" in runs[killed.info.run_id].data.tags[Tag.failure]
    assert sorted(r.info.status for r in runs.values()) == ["FINISHED", "KILLED"]


@pytest.mark.no_engine_server
def test_a_sweep_whose_store_is_down_at_its_start_is_refused_in_one_line(tmp_path):
    """A sweep's report is read back from its store: with the store unreachable at the start
    it launches nothing and says so in one line (exit 69, EX_UNAVAILABLE), no traceback."""
    result = specexp_in_process(
        "-m",
        *TINY,
        "replicate=0,1",
        cwd=tmp_path,
        env={**NO_BACKOFF, "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"},
    )
    output = result.stdout + result.stderr
    assert result.returncode == failure.STORE_DOWN, output[-2000:]
    assert "Traceback" not in output
    (line,) = [line for line in result.stdout.splitlines() if "MLflow store unreachable" in line]
    assert "nothing was launched" in line
    assert not list(tmp_path.rglob("requests.jsonl")) and server_pids() == set()

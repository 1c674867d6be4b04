"""One door, one behaviour (issue 60): `specexp run|sweep` and `python -m specexp [-m]` exit
with the same status for the same outcome - docs/cli.md's table, one test per status - and
print one line, never a traceback, for a store that is down. Each test runs both doors: in
this process where the outcome is the subject (`specexp_in_process`, with ``main=cli.main``
for the console script), as processes where the process is (a full disk's file-size limit,
a signal), the console script (`python -m specexp.cli`) beside `python -m specexp`."""

from __future__ import annotations

import errno
import json
import os
import resource
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from specexp import cli
from specexp.core.tinymodels import ensure_pair
from specexp.host import failure
from specexp.output import files
from specexp.tracking.store import TrackingStore
from tests.conftest import (
    REPO,
    SPECEXP,
    TINY,
    compose_job,
    fake_llama_server,
    is_sweep,
    runs_in,
    server_pids,
    specexp_in_process,
    start_cli,
    store_env,
)

# A store that is down, and MLflow's client retrying it without seconds of backoff.
DOWN = {
    "MLFLOW_TRACKING_URI": "http://127.0.0.1:9",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0",
}


def both_doors(
    tmp_path: Path, *args: str, env: dict[str, str], sweep: bool = False, store: bool = True
) -> dict[str, subprocess.CompletedProcess]:
    """``args`` through `specexp run|sweep` and `python -m specexp [-m]`, in this process,
    each in a directory (and, with ``store``, an MLflow store) of its own; by door."""
    doors: dict[str, Any] = {
        "specexp": (cli.main, ["sweep" if sweep else "run"]),
        "python -m specexp": (None, ["-m"] if sweep else []),
    }
    results = {}
    for door, (main, command) in doors.items():
        cwd = tmp_path / door.replace(" ", "_")
        cwd.mkdir()
        door_env = {**(store_env(cwd) if store else {}), **env}
        kwargs = {"main": main} if main else {}
        results[door] = specexp_in_process(*command, *args, cwd=cwd, env=door_env, **kwargs)
    return results


def assert_exit(results: dict[str, subprocess.CompletedProcess], status: int) -> None:
    for door, result in results.items():
        output = result.stdout + result.stderr
        assert result.returncode == status, f"{door}: {output[-3000:]}"
        assert "Traceback" not in output, f"{door}: {output[-3000:]}"


def as_program(module: str) -> Callable[[], int]:
    """``python -m MODULE``'s main: the module run as __main__ (runpy, as ``-m`` runs it), its
    arguments sys.argv[1:] as specexp_in_process sets them."""

    def main() -> int:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0  # a program that ends without sys.exit exits 0

    return main


@pytest.mark.no_engine_server
def test_0_done(tmp_path):
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "1")
    assert_exit(both_doors(tmp_path, *TINY, f"stack.bin_dir={bin_dir}", env={}), 0)


@pytest.mark.no_engine_server
@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_1_a_run_or_a_sweeps_job_failed(tmp_path, sweep):
    """No server is ready in 1 ms: the job fails once it started, its run FAILED in the store
    (a sweep: one of two, named by its own overrides, not the sweep's internal ones)."""
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "1")
    timeouts = "0.001,120" if sweep else "0.001"
    args = (*TINY, f"stack.bin_dir={bin_dir}", f"engine.ready_timeout_s={timeouts}")
    results = both_doors(tmp_path, *args, env={}, sweep=sweep)
    assert_exit(results, failure.RUN_FAILED)
    for door, result in results.items():
        store = f"sqlite:///{tmp_path / door.replace(' ', '_') / 'mlflow.db'}"  # both_doors'
        statuses = sorted(r.info.status for r in runs_in(store) if not is_sweep(r))
        assert statuses == (["FAILED", "FINISHED"] if sweep else ["FAILED"]), door
        if sweep:
            assert "1 of 2 job(s) failed: engine.ready_timeout_s=0.001" in result.stdout
            assert "multirun.parent_run_id" not in result.stdout + result.stderr


@pytest.mark.no_engine_server
@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_2_a_usage_error(tmp_path, sweep):
    results = both_doors(tmp_path, *TINY, "speculative=drafts", env={}, sweep=sweep, store=False)
    assert_exit(results, 2)
    assert all("did you mean 'draft'?" in r.stdout for r in results.values())


@pytest.mark.no_engine_server
@pytest.mark.parametrize("option", ["--config-name", "-cn", "--config-path", "-cp"])
def test_2_hydras_options_that_replace_specexps_config(tmp_path, option):
    """`python -m specexp --config-name NAME` went to Hydra and `specexp run --config-name`
    was an unknown option: both doors now refuse Hydra's options that replace specexp's own
    config, naming the one that adds a user's folder."""
    results = both_doors(tmp_path, option, str(tmp_path), *TINY, env={}, store=False)
    assert_exit(results, 2)
    assert all("--config-dir DIR" in r.stdout for r in results.values())


@pytest.mark.no_engine_server
def test_2_the_doctor_alias_checks_the_overrides_as_the_subcommand(tmp_path):
    """`python -m specexp.doctor` skipped the override checks `specexp doctor` makes, and
    printed a traceback for a usage error its own parsing found."""
    for given in (["speculative=drafts"], ["--config-name", "x"]):
        results = {
            "python -m specexp.doctor": specexp_in_process(
                *given, cwd=tmp_path, main=as_program("specexp.doctor")
            ),
            "specexp doctor": specexp_in_process("doctor", *given, cwd=tmp_path, main=cli.main),
        }
        assert_exit(results, 2)
        assert len({r.stdout for r in results.values()}) == 1


@pytest.mark.no_engine_server
@pytest.mark.parametrize("spelling", ["--config-dir", "hydra.searchpath"])
def test_0_a_users_own_model_from_a_folder_outside_the_checkout(tmp_path, spelling):
    """A user's model file (DIR/model/mine.yaml), given by either spelling, through both
    doors, each run from a folder of its own outside the checkout."""
    own = tmp_path / "own"
    (own / "model").mkdir(parents=True)
    model = (REPO / "conf/model/tiny-pair-small.yaml").read_text()
    (own / "model/mine.yaml").write_text(model.replace("name: tiny-pair-small", "name: mine"))
    given = (
        ["--config-dir", str(own)]
        if spelling == "--config-dir"
        else [f"hydra.searchpath=[file://{own}]"]
    )
    results = both_doors(tmp_path, *given, "model=mine", "dry_run=true", env={}, store=False)
    assert_exit(results, 0)
    assert all(" model=mine " in r.stdout for r in results.values())


@pytest.mark.no_engine_server
def test_the_version_is_specexps_from_both_doors(tmp_path):
    """`python -m specexp --version` printed Hydra's version."""
    printed = {
        door: specexp_in_process(
            "--version", cwd=tmp_path, **({"main": cli.main} if door == "specexp" else {})
        )
        for door in ("specexp", "python -m specexp")
    }
    assert_exit(printed, 0)
    assert {r.stdout for r in printed.values()} == {f"{cli.version()}\n"}


@pytest.mark.no_engine_server
def test_69_the_store_unreachable_before_anything_ran(tmp_path, capsys):
    """A sweep's report is read back from its store: refused at its start; `specexp
    compare`, which reads the store, says so in one line."""
    results = both_doors(tmp_path, *TINY, "replicate=0,1", env=DOWN, sweep=True, store=False)
    assert_exit(results, failure.STORE_DOWN)
    compared = specexp_in_process("compare", cwd=tmp_path, env=DOWN, main=cli.main)
    assert_exit({"specexp compare": compared}, failure.STORE_DOWN)
    assert compared.stdout.startswith("MLflow store unreachable: MlflowException: API request")
    assert not list(tmp_path.rglob("requests.jsonl")) and server_pids() == set()


def upload_line(result: subprocess.CompletedProcess, directory: str) -> None:
    """The command that puts the journals in the store is the last line."""
    assert result.stdout.splitlines()[-1].split()[:4] == [
        *"python -m specexp.upload".split(),
        directory,
    ], result.stdout[-2000:]


@pytest.mark.no_engine_server
def test_75_a_runs_record_in_a_journal_not_the_store(tmp_path):
    """The store down from the start: the run measures into its journal, then exits 75
    (EX_TEMPFAIL: upload later) with the upload command last; `specexp upload` with the
    store still down keeps the journal and exits 75 too."""
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "1")
    results = both_doors(tmp_path, *TINY, f"stack.bin_dir={bin_dir}", env=DOWN, store=False)
    assert_exit(results, failure.NOT_IN_STORE)
    for door, result in results.items():
        (job_dir,) = (tmp_path / door.replace(" ", "_")).glob("outputs/*/*")
        assert (job_dir / "mlflow_offline.json").exists()
        upload_line(result, str(job_dir))
    upload = specexp_in_process("upload", str(job_dir), cwd=tmp_path, env=DOWN, main=cli.main)
    assert_exit({"specexp upload": upload}, failure.NOT_IN_STORE)
    assert "MLflow store unreachable" in upload.stdout
    assert (job_dir / "mlflow_offline.json").exists()


@pytest.mark.no_engine_server
@pytest.mark.parametrize("store", ["a server down", "a folder that cannot be made"])
@pytest.mark.parametrize("command", ["compare", "history", "upload"])
def test_the_module_aliases_exit_as_the_subcommands_for_a_store_down(tmp_path, command, store):
    """Issue 60: `python -m specexp.compare|history|upload` printed a traceback for a store
    that was down, `specexp compare|history|upload` one line and 69 (75 for upload: its
    journals are kept). Both doors now go through the same main."""
    (tmp_path / "a-file").touch()  # a SQLite store's folder: a file stands in its place
    uri = (
        DOWN["MLFLOW_TRACKING_URI"]
        if store == "a server down"
        else f"sqlite:///{tmp_path}/a-file/mlflow.db"
    )
    journal = tmp_path / "job" / "mlflow_offline.json"  # the store it was meant for, down
    journal.parent.mkdir()
    journal.write_text(json.dumps({"tracking_uri": uri, "experiment": "specexp", "calls": []}))
    args = [str(journal.parent)] if command == "upload" else []
    env = {**DOWN, "MLFLOW_TRACKING_URI": uri}
    results = {
        f"python -m specexp.{command}": specexp_in_process(
            *args, cwd=tmp_path, env=env, main=as_program(f"specexp.{command}")
        ),
        f"specexp {command}": specexp_in_process(
            command, *args, cwd=tmp_path, env=env, main=cli.main
        ),
    }
    assert_exit(results, failure.NOT_IN_STORE if command == "upload" else failure.STORE_DOWN)
    assert all(r.stdout.startswith("MLflow store unreachable: ") for r in results.values())
    assert journal.exists()


def down(*args: Any, **kwargs: Any) -> None:
    raise ConnectionError("Connection refused: the tracking server is down")


@pytest.mark.no_engine_server
def test_75_a_sweeps_report_in_a_journal_not_the_store(tmp_path):
    """Issue 60: the store down at a sweep's end - `python -m specexp -m` exited 75 with the
    upload command last, `specexp sweep` printed 5 tracebacks after it and exited 1 (the
    API read the report back from the store)."""
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "1")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TrackingStore, "job_prompts", down)  # the report's first read
        results = both_doors(
            tmp_path,
            *TINY,
            f"stack.bin_dir={bin_dir}",
            "replicate=0,1",
            "hydra.sweep.dir=sweep",
            env={},
            sweep=True,
        )
    assert_exit(results, failure.NOT_IN_STORE)
    for result in results.values():
        upload_line(result, "sweep")


def full_disk_at(size: int) -> None:
    """In the child before exec: every write past ``size`` bytes of a file fails (EFBIG), as
    a full disk fails it with ENOSPC."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


@pytest.mark.no_engine_server
@pytest.mark.parametrize("door", ["specexp", "python -m specexp"])
def test_74_a_full_disk(tmp_path, door):
    """Issue 60: on a full disk `python -m specexp` exited 74 and `specexp run` 1. The
    process is the subject: the limit on every file it writes (tests/process/test_faults.py
    says why 32 kB)."""
    job = compose_job(*TINY)
    assert job.config.model.generate is not None
    ensure_pair(job.config.model.generate, job.engine.model_format)  # not made under the limit
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "1")
    command = ["-m", SPECEXP, "run"] if door == "specexp" else ["-m", "specexp"]
    process = subprocess.run(
        [sys.executable, *command, *TINY, f"stack.bin_dir={bin_dir}", "stats.measured_runs=100"],
        cwd=tmp_path,
        env={**os.environ, **DOWN, "MLFLOW_DISABLE_TELEMETRY": "true"},
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=lambda: full_disk_at(32_000),
    )
    assert_exit({door: process}, failure.DISK)


@pytest.mark.no_engine_server
def test_74_a_full_disk_in_a_sweeps_job(tmp_path):
    """Issue 60: a sweep whose job hit a full disk exited 1 from both doors, where the job
    alone exits 74. Each door's first requests.jsonl cannot be written (ENOSPC, as
    tests/process/test_faults.py fills the disk in this process)."""
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "1")
    appended = files.append_whole
    full: set[str] = set()  # the doors whose disk filled

    def disk_full_once(path: Path, lines: Any) -> None:
        door = path.relative_to(tmp_path).parts[0]
        if path.name == "requests.jsonl" and door not in full:
            full.add(door)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        appended(path, lines)

    args = (*TINY, f"stack.bin_dir={bin_dir}", "replicate=0", "tracking.enabled=false")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "append_whole", disk_full_once)
        results = both_doors(tmp_path, *args, env={}, sweep=True, store=False)
    assert_exit(results, failure.DISK)
    assert len(full) == 2
    assert all("1 of 1 job(s) failed" in r.stdout for r in results.values())


@pytest.mark.no_engine_server
@pytest.mark.parametrize("door", ["specexp", "python -m specexp"])
def test_130_interrupted(tmp_path, door):
    """Ctrl-C once the server answers: 128 + SIGINT, the shell's status, from both doors."""
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "20")
    args = (*TINY, f"stack.bin_dir={bin_dir}", "stats.measured_runs=1000", "tracking=off")
    process = (
        start_cli("run", *args, cwd=tmp_path, module=SPECEXP, stderr=subprocess.STDOUT)
        if door == "specexp"
        else start_cli(*args, cwd=tmp_path, stderr=subprocess.STDOUT)
    )
    deadline = time.monotonic() + 300
    while not any(p.stat().st_size for p in tmp_path.glob("outputs/*/*/requests.jsonl")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    output = process.communicate(timeout=120)[0]
    assert_exit({door: subprocess.CompletedProcess([], process.returncode, output, "")}, 130)
    assert "interrupted (SIGINT)" in output
    assert server_pids() == set()

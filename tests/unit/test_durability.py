"""Writes, journals and runs under faults without a server: a full disk and I/O errors on
every writer (a real file-size limit, RLIMIT_FSIZE, which fails writes past it with EFBIG as
a full disk fails them with ENOSPC; and injected ENOSPC/EIO), a kill while writing, a journal
cut short, runs abandoned by a killed process, a malformed tracking URI, the sweep's report
journaled and published. Issue 45's rows that need no server are reproduced here."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from mlflow.tracking import MlflowClient

from specexp import cli
from specexp.analysis.report import SweepFacts
from specexp.analysis.results import Artifact, RunStatus, Tag
from specexp.core import durable
from specexp.core.durable import append_whole, read_json_lines, write_atomic
from specexp.core.records import structure, unstructure
from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.schemas.stats import StatsConfig
from specexp.host import failure, owner
from specexp.output.files import RUN_FILE, set_aside_earlier_attempt
from specexp.output.terminal.loggers import quiet_libraries
from specexp.output.terminal.screen import console, logged_to
from specexp.run.events import Emitter, JobClosed, JobEvent
from specexp.run.session import JobResult, JobSession, close_session
from specexp.sweep.launch import _launch
from specexp.sweep.plan import Plan, PlannedJob, Step
from specexp.sweep.report import journal_sweep_end
from specexp.tracking.address import uri_problem
from specexp.tracking.journal import FailoverRun, OfflineRun
from specexp.tracking.store import TrackingStore
from tests.conftest import REPO, compose_job, store_env


@contextlib.contextmanager
def disk_full_past(size: int) -> Iterator[None]:
    """Every write of this process past ``size`` bytes of a file fails (EFBIG), as a full
    disk fails it: a real limit on every writer, old code and new alike."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_file_replaced_on_a_full_disk_keeps_its_old_content_and_no_temporary(tmp_path):
    path = tmp_path / "config.yaml"
    write_atomic(path, "old\n")
    with disk_full_past(1000), pytest.raises(OSError) as raised:
        write_atomic(path, "x" * 5000)
    assert raised.value.errno == errno.EFBIG and failure.is_disk_error(raised.value)
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["config.yaml"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_a_failing_sync_or_rename_leaves_the_old_file(tmp_path, monkeypatch, code):
    path = tmp_path / "effective.json"
    write_atomic(path, "{}")
    for name in ("fsync", "replace"):
        with monkeypatch.context() as patched:

            def fail(*args: object, _code: int = code) -> None:
                raise OSError(_code, os.strerror(_code))

            patched.setattr(durable.os, name, fail)
            with pytest.raises(OSError):
                write_atomic(path, '{"new": 1}')
        assert path.read_text() == "{}" and os.listdir(tmp_path) == ["effective.json"]


def test_a_new_file_gets_the_mode_open_would_give_it(tmp_path):
    write_atomic(tmp_path / "a", "x")
    (tmp_path / "b").write_text("x")
    assert (tmp_path / "a").stat().st_mode == (tmp_path / "b").stat().st_mode


def test_lines_appended_on_a_full_disk_are_appended_whole_or_not_at_all(tmp_path):
    path = tmp_path / Artifact.requests
    append_whole(path, ['{"i": 0}\n', '{"i": 1}\n'])
    before = path.read_bytes()
    with disk_full_past(len(before) + 10), pytest.raises(OSError):
        append_whole(path, [json.dumps({"i": 2, "pad": "y" * 100}) + "\n"])
    assert path.read_bytes() == before
    assert read_json_lines(path).records == [{"i": 0}, {"i": 1}] and not read_json_lines(path).torn


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_an_append_that_fails_part_way_is_cut_back(tmp_path, monkeypatch, code):
    path = tmp_path / Artifact.requests
    append_whole(path, ['{"i": 0}\n'])
    real_write, calls = os.write, []

    def half_then_fail(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(durable.os, "write", half_then_fail)
    with pytest.raises(OSError):
        append_whole(path, ['{"i": 1}\n', '{"i": 2}\n'])
    assert path.read_text() == '{"i": 0}\n' and len(calls) == 2


def test_a_torn_last_line_is_skipped_and_reported_a_bad_line_before_it_is_an_error(tmp_path):
    path = tmp_path / Artifact.requests
    path.write_text('{"i": 0}\n{"i": 1}\n{"i": 2, "itl_s": [0.01, 0.0')
    read = read_json_lines(path)
    assert read.records == [{"i": 0}, {"i": 1}] and read.torn.startswith('{"i": 2')
    assert "cut short" in read.describe(path) and "2 record(s)" in read.describe(path)
    path.write_text('{"i": 0}\nnot json\n{"i": 2}\n')
    with pytest.raises(ValueError, match=":2: not a JSON line"):
        read_json_lines(path)


def test_a_kill_while_writing_leaves_the_old_file_or_the_new_one_never_a_part(tmp_path):
    """A child rewrites one file with two contents of different lengths as fast as it can,
    and is killed with SIGKILL at 30 points of its writes: the file is always one of the two
    (a kill may leave a hidden temporary file beside it, never a part of the file)."""
    path = tmp_path / "journal.json"
    contents = ["a" * 200_000, "b" * 100]
    write_atomic(path, contents[1])
    program = (
        "import sys; from pathlib import Path; from specexp.core.durable import write_atomic\n"
        f"p = Path({str(path)!r}); c = ['a' * 200_000, 'b' * 100]\n"
        "print('ready', flush=True)\n"
        "i = 0\n"
        "while True:\n"
        "    write_atomic(p, c[i % 2]); i += 1\n"
    )
    for attempt in range(30):
        child = subprocess.Popen(
            [sys.executable, "-c", program],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(attempt * 0.002)  # into the writes, at a different point each time
        child.kill()
        child.wait()
        child.stdout.close()
        assert path.read_text() in contents
    assert {p.name for p in tmp_path.iterdir()} - {path.name} <= {
        p.name for p in tmp_path.glob(".journal.json.*.tmp")
    }


def journal(tmp_path: Path) -> OfflineRun:
    return OfflineRun(
        tmp_path / Artifact.offline_journal,
        "sqlite:///unused.db",
        "specexp",
        "unreachable",
        "job",
        {Tag.kind: "job"},
    )


def test_a_journal_on_a_full_disk_keeps_every_call_it_took_issue_45(tmp_path):
    """Issue 45: the journal was rewritten in place and left at 0 bytes by a full disk.
    Now a write that does not fit fails, and the journal keeps every call before it."""
    run = journal(tmp_path)
    run.log_params({"a": 1})
    run.log_metrics({"tok_per_s": 1.0}, step=0)
    size = (tmp_path / Artifact.offline_journal).stat().st_size
    with disk_full_past(size + 50), pytest.raises(OSError):
        run.log_metrics({f"m{i}": float(i) for i in range(100)}, step=1)
    kept = json.loads((tmp_path / Artifact.offline_journal).read_text())
    assert [name for name, _ in kept["calls"]] == ["log_params", "log_metrics"]


def test_a_store_and_journal_both_failing_raise_rather_than_lose_silently(tmp_path):
    class DeadStore:
        run_id, uri = "r1", "http://127.0.0.1:9"
        store = type("S", (), {"experiment_name": "specexp"})()

        def set_tags(self, tags: object) -> None:
            raise ConnectionError("store down")

    told = []
    run = FailoverRun(DeadStore(), tmp_path / Artifact.offline_journal, told.append)  # type: ignore[arg-type]
    with disk_full_past(10), pytest.raises(OSError):
        run.set_tags({"a": "b"})
    assert told == [] and not (tmp_path / Artifact.offline_journal).exists()


@pytest.fixture
def full_disk(tmp_path, monkeypatch) -> Path:
    """A disk that is full while the space ``tmp_path``'s job set aside is held: every sync
    fails with ENOSPC until the reserve is given back (issue 52)."""
    real_fsync = os.fsync
    reserve = tmp_path / durable.RESERVE_FILE

    def fsync(fd: int) -> None:
        if reserve.exists():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    durable.reserve_space(tmp_path)
    assert reserve.stat().st_size == durable.RESERVE_BYTES
    monkeypatch.setattr(durable.os, "fsync", fsync)
    return reserve


@pytest.mark.parametrize("writer", ["append", "replace"])
def test_the_first_write_on_a_full_disk_is_made_in_the_space_set_aside_and_ends_the_job(
    tmp_path, full_disk, writer
):
    """Issue 52: a full disk lost the run it was writing. The first write that finds the disk
    full is made in the space the job set aside, whole, then raises one line naming the file
    and the space it needed (exit 74); the writes after it (closing the job) have the rest."""
    path = tmp_path / (Artifact.requests if writer == "append" else Artifact.offline_journal)
    line = '{"run": 0}\n'
    with pytest.raises(durable.DiskFull) as raised:
        append_whole(path, [line]) if writer == "append" else write_atomic(path, line)
    message = failure.one_line(raised.value)
    assert str(path) in message and "needed 11 B" in message and "set aside" in message
    assert failure.exit_status(raised.value) == failure.DISK
    assert path.read_text() == line and not full_disk.exists()
    append_whole(tmp_path / "after", ["x\n"])  # closing the job: room left
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, "after"])


def test_a_full_disk_without_space_set_aside_writes_nothing_and_says_so(tmp_path, full_disk):
    durable.release_space(tmp_path)
    (tmp_path / durable.RESERVE_FILE).write_text("")  # the disk still full
    path = tmp_path / Artifact.requests
    with pytest.raises(durable.DiskFull, match="not written"):
        append_whole(path, ['{"run": 0}\n'])
    assert path.read_text() == ""


def test_an_io_error_keeps_the_space_set_aside(tmp_path, monkeypatch):
    durable.reserve_space(tmp_path)

    def fail(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(durable.os, "fsync", fail)
    with pytest.raises(OSError) as raised:
        append_whole(tmp_path / Artifact.requests, ["x\n"])
    assert raised.value.errno == errno.EIO and not isinstance(raised.value, durable.DiskFull)
    assert (tmp_path / durable.RESERVE_FILE).exists()
    durable.release_space(tmp_path)


def test_a_journal_whose_first_write_finds_the_disk_full_keeps_the_calls_after(tmp_path, full_disk):
    """Issue 52: the store failing on a full disk, the journal's first write failed too, and
    the run's later calls went back to the store. The first call is written in the space
    set aside, the user told once, and every later call goes to the journal."""

    class FullStore:
        run_id, uri = "r1", "sqlite:///full.db"
        store = type("S", (), {"experiment_name": "specexp"})()
        calls: list[str] = []

        def set_tags(self, tags: object) -> None:
            self.calls.append("set_tags")
            raise OSError("database or disk is full")

        def end(self, status: str) -> None:
            self.calls.append("end")

    told: list[str] = []
    store = FullStore()
    run = FailoverRun(store, tmp_path / Artifact.offline_journal, told.append)  # type: ignore[arg-type]
    with pytest.raises(durable.DiskFull):
        run.set_tags({Tag.energy_source: "not measured"})
    run.set_tags({Tag.failure: "disk full"})
    run.end(RunStatus.failed)
    kept = json.loads((tmp_path / Artifact.offline_journal).read_text())
    assert [name for name, _ in kept["calls"]] == ["set_tags", "set_tags", "end"]
    assert kept["continues"] == "r1" and store.calls == ["set_tags"] and len(told) == 1


def test_a_log_file_the_disk_refuses_is_dropped_without_a_traceback(tmp_path, capsys, monkeypatch):
    """Issue 52: the log writers failed in turn on a full disk, each with its traceback on
    the terminal (the console's log file at its flush, the logging handlers at each line)."""
    monkeypatch.setattr(logging, "raiseExceptions", True)
    quiet_libraries()
    handler = logging.FileHandler(tmp_path / "hydra.log")
    logging.getLogger().addHandler(handler)
    try:
        with disk_full_past(100), logged_to(tmp_path / "specexp.log"):
            console.print("x" * 300)
            console.print("the one line")
            failure.log_traceback(OSError(errno.ENOSPC, "No space left on device"))
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    captured = capsys.readouterr()
    assert "the one line" in captured.out and captured.err == ""
    assert "Traceback" not in captured.out


@pytest.fixture
def store_uri(tmp_path) -> str:
    return store_env(tmp_path)["MLFLOW_TRACKING_URI"]


def test_upload_of_a_journal_cut_short_ends_the_run_failed_and_says_what_it_recovered(
    tmp_path, store_uri, capsys
):
    """Issue 45: upload crashed on the journal a full disk left. A journal that stops before
    the run's end (killed, or its disk full) is uploaded, the run ended FAILED, and the
    upload says how many calls and requests it recovered and that the last line was torn."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    run = journal(job_dir)
    run.log_metrics({"tok_per_s": 5.0}, step=0)
    (job_dir / Artifact.requests).write_text('{"ok": true}\n{"ok": tr')
    run.log_artifacts([job_dir / Artifact.requests])
    assert cli.main(["upload", str(job_dir), "--tracking-uri", store_uri]) == 0
    said = capsys.readouterr().out
    assert "2 call(s); 1 request record(s), its last line cut short" in " ".join(said.split())
    assert "ended FAILED" in said
    (stored,) = MlflowClient(store_uri).search_runs(
        [MlflowClient(store_uri).get_experiment_by_name("specexp").experiment_id]
    )
    assert (
        stored.info.status == RunStatus.failed and "journal stops" in stored.data.tags[Tag.failure]
    )
    assert stored.data.metrics["tok_per_s"] == 5.0


def test_upload_of_an_empty_journal_says_so_and_keeps_it(tmp_path, capsys):
    """Issue 45: `specexp.upload` crashed on the 0-byte journal a full disk left."""
    (tmp_path / Artifact.offline_journal).write_text("")
    assert cli.main(["upload", str(tmp_path), "--tracking-uri", "sqlite:///x.db"]) == 1
    assert "not a whole journal" in capsys.readouterr().out
    assert (tmp_path / Artifact.offline_journal).exists()


def test_a_journal_moved_with_its_files_uploads_them_from_where_it_is(tmp_path, store_uri, capsys):
    first = tmp_path / "first"
    first.mkdir()
    run = journal(first)
    (first / Artifact.requests).write_text('{"ok": true}\n')
    run.log_artifacts([first / Artifact.requests])
    run.end(RunStatus.finished)
    moved = first.rename(tmp_path / "attempt-1")
    assert cli.main(["upload", str(moved), "--tracking-uri", store_uri]) == 0
    client = MlflowClient(store_uri)
    (stored,) = client.search_runs([client.get_experiment_by_name("specexp").experiment_id])
    assert [a.path for a in client.list_artifacts(stored.info.run_id)] == [Artifact.requests]


@pytest.mark.parametrize(
    "uri",
    ["htp://127.0.0.1:5000", "http//127.0.0.1:5000", "http://", "http://h:port", "sqlite://"],
)
def test_a_malformed_tracking_uri_is_refused_by_name(uri, tmp_path, capsys):
    assert uri_problem(uri)
    with pytest.raises(ConfigError):
        TrackingStore(uri, "specexp")
    (tmp_path / Artifact.offline_journal).write_text("{}")
    assert cli.main(["upload", str(tmp_path), "--tracking-uri", uri]) == 2


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:5000",
        "https://u:p@host/x",
        "sqlite:///mlruns/mlflow.db",
        "./mlruns",
        "postgresql+psycopg2://u:p@db/x",
        "file:///tmp/mlruns",
        "databricks",
    ],
)
def test_well_formed_tracking_uris_pass(uri):
    assert uri_problem(uri) is None


def dead_owner() -> str:
    """The owner string of a process of this host that has ended."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from specexp.host.owner import this_process; print(this_process())",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_runs_abandoned_by_a_process_that_is_gone_are_ended_killed_and_no_others(store_uri):
    store = TrackingStore(store_uri, "specexp")
    gone = dead_owner()
    assert owner.gone(gone) and not owner.gone(owner.this_process())
    abandoned = store.start_run("killed", {Tag.process: gone})
    child = store.start_run("child", {Tag.process: gone}, parent_run_id=abandoned.run_id)
    alive = store.start_run("alive", {Tag.process: owner.this_process()})
    elsewhere = store.start_run("other host", {Tag.process: "another-host 1 1.00"})
    untagged = store.start_run("untagged", {})
    assert sorted(store.end_abandoned()) == sorted([abandoned.run_id, child.run_id])
    status = {r: store.client.get_run(r).info.status for r in (abandoned.run_id, child.run_id)}
    assert set(status.values()) == {RunStatus.killed}
    for run in (alive, elsewhere, untagged):
        assert store.client.get_run(run.run_id).info.status == "RUNNING"
    assert "abandoned" in store.client.get_run(abandoned.run_id).data.tags[Tag.failure]


def test_a_reused_pid_is_not_the_process_that_owned_the_run():
    me = owner.this_process()
    host, pid, started = me.rsplit(" ", 2)
    assert owner.gone(f"{host} {pid} {float(started) - 10:.2f}")


def test_an_earlier_attempts_files_are_set_aside_whole(tmp_path):
    """Issue 52: the killed attempt's run.json (which run its files are) was written over
    by the next attempt's; it goes with them."""
    (tmp_path / Artifact.requests).write_text("old\n")
    (tmp_path / Artifact.offline_journal).write_text("{}")
    (tmp_path / RUN_FILE).write_text('{"run_id": "killed"}')
    (tmp_path / "specexp.log").write_text("log")
    assert set_aside_earlier_attempt(tmp_path) == tmp_path / "attempt-1"
    assert (tmp_path / "attempt-1" / Artifact.requests).read_text() == "old\n"
    assert (tmp_path / "attempt-1" / RUN_FILE).read_text() == '{"run_id": "killed"}'
    assert not (tmp_path / Artifact.requests).exists() and (tmp_path / "specexp.log").exists()
    (tmp_path / Artifact.requests).write_text("second\n")
    assert set_aside_earlier_attempt(tmp_path) == tmp_path / "attempt-2"
    assert set_aside_earlier_attempt(tmp_path) is None


def test_closing_a_job_tries_every_step_and_ends_the_run_whatever_failed(tmp_path):
    """Every observer hears the job's end whatever an earlier one raised (the files
    observer's disk failing), and the first error is raised after."""
    ended = []

    class FailingDisk:
        def notify(self, event: JobEvent) -> None:
            raise OSError(errno.EIO, "Input/output error")

    class Tracker:
        def notify(self, event: JobEvent) -> None:
            if isinstance(event, JobClosed):
                ended.append(event.status)
                raise OSError(errno.ENOSPC, "No space left on device")

    session = JobSession(
        compose_job("dry_run=true"),
        Emitter([FailingDisk(), Tracker()]),
        JobResult(RunStatus.failed),
        tmp_path / "server.log",
        {tmp_path / "server.log"},
    )
    with pytest.raises(OSError) as raised:
        close_session(session)
    assert raised.value.errno == errno.EIO and ended == [RunStatus.failed]
    assert failure.exit_status(raised.value) == failure.DISK
    assert failure.exit_status(ValueError("x")) == failure.BUG


def test_a_traceback_goes_to_the_log_file_and_nothing_to_the_terminal(tmp_path, capsys):
    handler = logging.FileHandler(tmp_path / "specexp.log")
    logging.getLogger().addHandler(handler)
    try:
        try:
            raise RuntimeError("deep\nsecond line")
        except RuntimeError as exc:
            failure.log_traceback(exc)
            assert failure.one_line(exc) == "RuntimeError: deep"
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    assert "Traceback" in (tmp_path / "specexp.log").read_text()
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err


def test_the_sweep_facts_a_report_journal_keeps_come_back_as_they_were(tmp_path):
    facts = SweepFacts(
        parent_run_id="p",
        engine="llamacpp",
        order="interleaved",
        baseline="speculative=none",
        crossover_factor="concurrency.streams",
        stats=StatsConfig(measured_runs=7),
        speculative={"f1": SpeculativeConfig(method="draft", draft_model="d.gguf")},
        sequences=[],
        resumed=["r0"],
    )
    assert structure(SweepFacts, json.loads(json.dumps(unstructure(facts)))) == facts

    class Store:
        uri, experiment_name = "http://u:secret@host:5000", "specexp"

    path = journal_sweep_end(tmp_path, Store(), facts, RunStatus.finished, True, 0)  # type: ignore[arg-type]
    kept = json.loads(path.read_text())
    assert "secret" not in kept["tracking_uri"] and kept["facts"]["parent_run_id"] == "p"


class RecordingLauncher:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def launch(self, job_overrides: list[list[str]], initial_job_idx: int) -> list[None]:
        self.calls.append((initial_job_idx, len(job_overrides)))
        return [None] * len(job_overrides)


def test_a_resumed_sweeps_jobs_keep_their_place_in_the_whole_plan_issue_45():
    """Issue 45: jobs were numbered among those still to run, so the first resumed job
    wrote into finished job 0's directory. Numbered in the whole plan, with finished jobs 0
    and 2, the jobs to run are 1, 3 and 4 - in batches that never cross a finished one."""
    jobs = []
    for tokens in (8, 16, 24, 32, 40):
        job = compose_job(f"workload.max_tokens={tokens}")
        jobs.append(
            PlannedJob([f"workload.max_tokens={tokens}"], job, job.config_fingerprint(), "s", [])
        )
    jobs[0].finished_run_id = jobs[2].finished_run_id = "done"
    plan = Plan(jobs)
    steps = [Step(j) for j in plan.to_run]
    launcher = RecordingLauncher()
    _launch(launcher, plan, steps, [], None, batch=8)
    assert launcher.calls == [(1, 1), (3, 2)]
    launcher.calls.clear()
    _launch(launcher, plan, steps, [], None, batch=1)
    assert launcher.calls == [(1, 1), (3, 1), (4, 1)]

"""Issue 52, item 3: a resumed sequential sweep keeps its launches. Each launch measured
whole is a line of launches.jsonl; a job reopened by a resumed sweep takes those lines back
(its files and run hold every launch again), and the sequences replay their rounds and looks
on them - the same looks, information and spent error as the killed sweep's - then measure
only the launches missing."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Optional

import pytest

from specexp.analysis.results import Artifact, RunStatus
from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.notes import Note, NoteKind
from specexp.core.records import RecordError
from specexp.core.sequential import SequentialComparison
from specexp.engines.records import Engagement, Setting
from specexp.output.files import FilesObserver
from specexp.run import session as sessions
from specexp.run.events import Emitter, JobOpened, LaunchMeasured, RunMeasured, SettingsReadBack
from specexp.run.launches import CompletedLaunch, completed_launches
from specexp.run.session import JobResult, JobSession, open_session
from specexp.sweep.plan import PlannedJob, Step
from specexp.sweep.sequential import run_sequences
from tests.conftest import compose_job
from tests.unit.test_sweep_plan import planned

ENGAGED = {"speculative": Setting("draft", "draft", Engagement.engaged, "log: draft loaded")}


def run_of(launch: int, run: int, warmup: bool, tok_per_s: float) -> RunResult:
    """A run of one request whose tok/s is ``tok_per_s``."""
    record = RequestRecord(
        run, 0, warmup, 1000.0 + run, launch=launch, ok=True, output_tokens=64, e2e_s=1.0
    )
    return RunResult(run, warmup, 64 / tok_per_s, [record], launch=launch, started_unix=1000.0)


def launch_said(emit: Emitter, launch: int, first_run: int, tok_per_s: list[float]) -> None:
    """One launch as measure.py says it: a warm-up, the measured runs, the settings read
    back, the launch."""
    runs = [run_of(launch, 0, True, tok_per_s[0])] + [
        run_of(launch, first_run + k, False, v) for k, v in enumerate(tok_per_s)
    ]
    for run in runs:
        emit(RunMeasured(run, {}, "rapl"))
    emit(SettingsReadBack(ENGAGED))
    emit(LaunchMeasured(launch, tuple(r for r in runs if not r.warmup), 12.5 + launch))


def test_a_completed_launch_is_written_whole_and_read_back_as_it_was():
    run = run_of(2, 7, False, 50.0)
    run.counter_deltas, run.accounting_deltas = {"drafts": 4.0}, {"tokens": 64.0}
    run.machine_warnings = [Note(NoteKind.high_cv, "the CPU was busy")]
    launch = CompletedLaunch(
        "abc", 2, 31.5, [run_of(2, 0, True, 40.0), run], [None, "rapl"], ENGAGED
    )
    line = json.dumps(launch.to_json())
    assert CompletedLaunch.from_json(json.loads(line)) == launch
    assert json.loads(line)["runs"][1]["format_version"] == RunResult.HISTORY.current


def test_the_launches_taken_back_are_the_configurations_from_the_first_on(tmp_path):
    def line(fingerprint: str, index: int) -> str:
        launch = CompletedLaunch(
            fingerprint, index, 1.0, [run_of(index, 0, False, 1.0)], [None], {}
        )
        return json.dumps(launch.to_json()) + "\n"

    path = tmp_path / Artifact.launches
    assert completed_launches(tmp_path, "a") == []  # an older specexp's attempt: none
    path.write_text(line("a", 0) + line("a", 1) + line("a", 3) + line("a", 4))
    assert [c.launch for c in completed_launches(tmp_path, "a")] == [0, 1]  # 2 is missing
    assert completed_launches(tmp_path, "b") == []  # another configuration's
    path.write_text(line("a", 0) + line("a", 1)[:40])  # the kill cut the last line short
    assert [c.launch for c in completed_launches(tmp_path, "a")] == [0]
    unmatched = {**json.loads(line("a", 0)), "energy_sources": []}
    path.write_text(json.dumps(unmatched) + "\n")
    with pytest.raises(RecordError, match=r"0 energy sources for 1 runs"):
        completed_launches(tmp_path, "a")
    newer = {**json.loads(line("a", 0)), "format_version": 99}
    path.write_text(json.dumps(newer) + "\n")
    with pytest.raises(RecordError, match=r"launches.jsonl:1: a completed launch record"):
        completed_launches(tmp_path, "a")


def test_a_reopened_job_takes_back_its_launches_and_writes_them_again(tmp_path, monkeypatch):
    """The killed attempt's files go to attempt-1/; the new attempt's requests.jsonl and
    launches.jsonl hold the taken-back launches as they were, ready for another kill."""
    monkeypatch.setattr(sessions, "check_prerequisites", lambda job, emit: None)
    job = compose_job("dry_run=true", "stats.launches=4")
    said: list[str] = []
    emit = Emitter([FilesObserver(said.append)])
    emit(JobOpened(job, tmp_path))
    launch_said(emit, 0, 0, [10.0, 11.0])
    launch_said(emit, 1, 2, [12.0, 13.0])
    earlier = {a: (tmp_path / a).read_bytes() for a in (Artifact.requests, Artifact.launches)}

    session = open_session(job, tmp_path, Emitter([FilesObserver(said.append)]), take_back=True)
    assert session.launch_s == {0: 12.5, 1: 13.5}
    assert [(r.launch, r.run, r.warmup) for r in session.result.runs] == [
        (0, 0, True), (0, 0, False), (0, 1, False), (1, 0, True), (1, 2, False), (1, 3, False)
    ]  # fmt: skip
    assert session.effective == ENGAGED
    for artifact, content in earlier.items():
        assert (tmp_path / "attempt-1" / artifact).read_bytes() == content
        assert (tmp_path / artifact).read_bytes() == content
    assert said[-1].startswith("2 launch(es) the earlier attempt completed taken back from ")
    assert said[-1].split(" from ")[1].startswith(str(tmp_path / "attempt-1"))

    # An attempt of an older specexp, which wrote no launches.jsonl: measured from scratch.
    older = tmp_path / "older"
    older.mkdir()
    (older / Artifact.requests).write_text((tmp_path / Artifact.requests).read_text())
    reopened = open_session(job, older, Emitter([FilesObserver(said.append)]), take_back=True)
    assert reopened.result.runs == [] and reopened.launch_s == {}
    assert not (older / Artifact.requests).exists() and (older / "attempt-1").is_dir()


# Replaying the rounds ---------------------------------------------------------------------


class Killed(Exception):
    """The sweep killed between two launches."""


class Arms:
    """The launcher and the open jobs of a sweep of sequences, its servers drawn: an arm's
    launch measures its runs at tok/s fixed by the arm, the launch and the run (the
    candidate 1% faster, launches 2% apart, runs 1%), unless its session holds that launch
    already - as a job reopened by a resumed sweep holds the launches it took back."""

    def __init__(self, taken_back: Optional[dict[str, JobSession]] = None, kill_after: int = -1):
        self.taken_back = taken_back or {}
        self.kill_after = kill_after
        self.open: dict[str, JobSession] = {}
        self.measured: list[tuple[str, int]] = []

    def launch(self, step: Step, extra: list[str]) -> None:
        if len(self.measured) == self.kill_after:
            raise Killed
        job, part = step.planned, step.part
        assert part is not None
        if job.label not in self.open:
            self.open[job.label] = self._reopened(job)
        session = self.open[job.label]
        if part in session.launch_s:
            return
        (runs,) = [int(e.split("=")[1]) for e in extra if e.startswith("multirun.part_runs=")]
        done = sum(not r.warmup for r in session.result.runs)
        mean = 100.0 * draw(job.label, part, -1, 0.02)
        measured = [run_of(part, 0, True, mean)] + [
            run_of(part, done + k, False, mean * draw(job.label, part, k, 0.01))
            for k in range(runs)
        ]
        session.result.runs += measured
        session.launch_s[part] = sum(r.wall_s for r in measured) + 20.0
        self.measured.append((job.label, part))

    def _reopened(self, job: PlannedJob) -> JobSession:
        earlier = self.taken_back.get(job.label)
        session = JobSession(
            job.job, Emitter([]), JobResult(RunStatus.measuring), Path("server.log"), set()
        )
        if earlier is not None:
            session.result.runs = list(earlier.result.runs)
            session.launch_s = dict(earlier.launch_s)
        return session

    def sessions(self) -> list[JobSession]:
        return list(self.open.values())

    def finish_all(self) -> None:
        pass


def draw(label: str, launch: int, run: int, spread: float) -> float:
    return random.Random(f"{label}/{launch}/{run}").gauss(1.0, spread)


def sequences(arms: Arms) -> list[SequentialComparison]:
    settings = ("stats.launches=8", "stats.sequential.max_launches=8", "stats.warmup_runs=1")
    pair = (planned("speculative=none", *settings), planned("speculative=draft", *settings))
    return run_sequences([pair], arms.launch, arms, seed=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("kill_after", [1, 2, 7, 8, 9, 11])
def test_a_resumed_sequence_replays_the_killed_ones_looks_and_measures_only_what_is_missing(
    kill_after,
):
    """Killed after ``kill_after`` launches - in the first round, at a round's end, before
    and after the first look, half-way through a round after the runs per launch were
    planned - and resumed with the launches it completed: the record is the uninterrupted
    sequence's, look for look, and every launch is measured once over both attempts."""
    whole = Arms()
    (expected,) = sequences(whole)
    assert len(expected.record.looks) >= 2 and expected.record.runs_per_launch is not None
    assert len(whole.measured) > kill_after

    killed = Arms(kill_after=kill_after)
    with pytest.raises(Killed):
        sequences(killed)
    resumed = Arms(taken_back=killed.open)
    (outcome,) = sequences(resumed)

    assert outcome == expected
    assert killed.measured == whole.measured[:kill_after]
    assert sorted(resumed.measured) == sorted(whole.measured[kill_after:])
    assert {label: s.result.runs for label, s in resumed.open.items()} == {
        label: s.result.runs for label, s in whole.open.items()
    }

"""A sweep as events, and its two observers, as a job's are: the console (the plan said in
lines - its jobs, the baseline chosen, the order, the budget's power - and at the end what
failed) and the tracker (the parent run and its saved view started, and at the end the
report journaled and published, or kept for ``specexp upload`` when the store fails; what
it has to tell goes to the ``say`` its caller gives). :func:`specexp.sweep.launch.run_sweep`
emits and launches; this module prints and writes."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from rich.markup import escape

from specexp.analysis.report import SweepFacts
from specexp.analysis.results import Artifact, RunKind, RunStatus, Tag
from specexp.core.redaction import redact_text
from specexp.core.schemas.multirun import JobOrder
from specexp.core.sequential import SequentialComparison, StopReason
from specexp.host import failure, owner
from specexp.output.files import RUN_FILE
from specexp.output.terminal.screen import console
from specexp.output.terminal.sweep_report import print_budget
from specexp.sweep.plan import Plan, PlannedJob, describe
from specexp.sweep.report import (
    end_sweep,
    journal_sweep_end,
    replay_sweep_end,
    sweep_facts,
    sweep_view,
)
from specexp.sweep.sequential import BudgetPower
from specexp.tracking.journal import journals_under
from specexp.tracking.store import RunLog, TrackingStore, now_ms


@dataclass(frozen=True)
class SweepPlanned:
    """The sweep is about to launch: its plan, the jobs measured until decided, the
    baseline (``chosen``: by specexp, not configured), how its runs are ordered, and what
    its budget can detect."""

    plan: Plan
    until_decided: tuple[PlannedJob, ...]
    baseline: Optional[str]
    baseline_chosen: bool
    order: str
    budget: Optional[BudgetPower]


@dataclass(frozen=True)
class SweepEnded:
    """The sweep's launches are over: its status, its comparisons measured until decided,
    whether its job runs still open are to be ended (not Slurm's, which outlive it), the
    error that stopped it (one line), if one did, and the jobs that failed of those it ran."""

    status: str
    sequences: tuple[SequentialComparison, ...]
    end_children: bool
    error: Optional[str]
    failed_jobs: tuple[str, ...]
    jobs_to_run: int


SweepEvent = Union[SweepPlanned, SweepEnded]


class SweepConsole:
    """Says the plan, and at the end what stopped the sweep and which jobs failed."""

    def notify(self, event: SweepEvent) -> None:
        if isinstance(event, SweepPlanned):
            self._planned(event)
        else:
            self._ended(event)

    def _planned(self, event: SweepPlanned) -> None:
        chosen = (
            [
                f"baseline: {event.baseline} (the swept factor's first value; "
                "multirun.baseline sets another)"
            ]
            if event.baseline and event.baseline_chosen
            else []
        )
        for line in [*describe(event.plan, event.until_decided), *chosen, f"order: {event.order}"]:
            console.print(line)
        if event.budget is not None:
            print_budget(event.budget.statement, event.budget.short)

    def _ended(self, event: SweepEnded) -> None:
        if event.error is not None:
            console.print(
                f"[red]sweep failed:[/] {escape(event.error)} (traceback: specexp.log); its "
                "runs are ended FAILED"
            )
        if event.failed_jobs and event.status == RunStatus.finished:
            console.print(
                f"[red]{len(event.failed_jobs)} of {event.jobs_to_run} job(s) failed:[/] "
                + escape(", ".join(event.failed_jobs))
            )
        stopped = [s for s in event.sequences if s.record.stop == StopReason.failed]
        if stopped:
            console.print(
                f"[red]{len(stopped)} comparison(s) stopped without a verdict, an arm failed:[/] "
                + escape(", ".join(f"{s.candidate_label} vs {s.baseline_label}" for s in stopped))
                + "; the sweep resumed in its folder measures them again"
            )


class SweepTracker:
    """Holds the sweep's parent run (when tracked: ``store``), and publishes its report at
    the end, journaled first beside the jobs' directories (``sweep_dir``); ``say`` tells the
    user where a report the store did not take is kept."""

    def __init__(
        self,
        store: Optional[TrackingStore],
        sweep_dir: Path,
        order: JobOrder,
        say: Callable[[str], None],
    ):
        self.store, self.sweep_dir, self.order, self.say = store, sweep_dir, order, say
        self.parent: Optional[RunLog] = None
        # When the parent started: each publication of its report logs its points at this
        # time, so that the store keeps them once (a sweep resumed, its report published again).
        self.started_ms: Optional[int] = None
        self._planned: Optional[SweepPlanned] = None

    @property
    def parent_run_id(self) -> Optional[str]:
        return self.parent.run_id if self.parent else None

    def notify(self, event: SweepEvent) -> None:
        if isinstance(event, SweepPlanned):
            self._planned = event
            if self.store is not None:
                self.parent = self._start_parent(self.store, event.plan)
        else:
            self._ended(event)

    def _start_parent(self, store: TrackingStore, plan: Plan) -> RunLog:
        """The sweep's parent run: the one an earlier run of this sweep (its folder) started,
        open again, so that a sweep has one parent however often it is resumed and its
        report published; else a new one."""
        tags: dict[str, str] = {
            Tag.kind: RunKind.sweep,
            Tag.process: owner.this_process(),
            Tag.jobs: str(len(plan.jobs)),
            Tag.jobs_to_run: str(len(plan.to_run)),
            Tag.planned_server_launches: str(plan.server_launches),
            Tag.order: self.order,
        }
        earlier = earlier_parent(store, self.sweep_dir)
        if earlier is not None:
            store.client.update_run(earlier, status="RUNNING")
            parent = store.run(earlier)
            parent.set_tags(tags)
        else:
            parent = store.start_run(f"sweep ({len(plan.jobs)} jobs)", tags)
            parent.log_params({"overrides": redact_text(" ".join(sys.argv[1:]))})
        sweep_view(store, parent.run_id, plan)
        self.started_ms = store.client.get_run(parent.run_id).info.start_time
        return parent

    def _ended(self, event: SweepEnded) -> None:
        if self.store is not None and self.parent is not None and self._planned is not None:
            planned = self._planned
            facts = sweep_facts(
                planned.plan, self.parent.run_id, planned.baseline, planned.order, event.sequences
            )
            publish_end(
                self.store,
                self.parent,
                facts,
                event.status,
                event.end_children,
                self.sweep_dir,
                self.say,
                self.started_ms,
            )


def earlier_parent(store: TrackingStore, sweep_dir: Path) -> Optional[str]:
    """The parent run an earlier run of the sweep in ``sweep_dir`` started, as its tracked
    jobs wrote it down, if the store holds it."""
    for record in sorted(sweep_dir.glob(f"*/{RUN_FILE}")):
        try:
            parent_id = json.loads(record.read_text()).get("parent_run_id")
        except (OSError, ValueError):  # a record cut short: the others say it
            continue
        if parent_id and store.is_sweep_parent(parent_id):
            return str(parent_id)
    return None


def publish_end(
    store: TrackingStore,
    parent: RunLog,
    facts: SweepFacts,
    status: str,
    end_children: bool,
    sweep_dir: Path,
    say: Callable[[str], None],
    published_at_ms: Optional[int] = None,
) -> None:
    """The report and the parent's end in the store (its metrics logged at
    ``published_at_ms``, else now), journaled beside the jobs' directories first: kept there
    when the store fails now or the sweep is killed while publishing, for
    `python -m specexp.upload` (or the sweep resumed here) to publish later (``say`` tells
    where). A job whose record went to its journal holds the report back with it: the
    upload publishes the report once that record is in the store, so that it counts the job
    as it ended, not as an open run ended FAILED."""
    at_ms = published_at_ms or now_ms()
    try:
        journal = journal_sweep_end(sweep_dir, store, facts, status, end_children, at_ms)
    except OSError as exc:  # a full disk: the store may still take the report
        failure.log_traceback(exc)
        journal = None
    held_by = store.not_uploaded(journals_under([sweep_dir])[Artifact.offline_journal])
    if journal is not None and held_by:
        say(
            f"[bold yellow]{len(held_by)} job record(s) of the sweep are in journals[/] (the "
            f"store failed during them): the report waits for them in {journal}"
        )
        return
    try:
        end_sweep(store, parent, facts, status, end_children, at_ms)
    except Exception as exc:  # whatever the store's failure, the sweep's results are kept
        if journal is None:
            raise
        failure.log_traceback(exc)
        say(
            f"[bold yellow]MLflow store failed at the sweep's end[/] ({redact_text(store.uri)}: "
            f"{escape(failure.one_line(exc))}): the report is kept in {journal}; publish it "
            f"under the same parent run with: python -m specexp.upload {sweep_dir} "
            "[--tracking-uri URI]"
        )
    else:
        if journal is not None:
            journal.unlink()


def publish_left_report(store: TrackingStore, sweep_dir: Path, say: Callable[[str], None]) -> None:
    """A report an earlier run of this sweep journaled and did not publish (its store down,
    or the sweep killed while publishing), published before this run journals its own;
    ``say`` tells what became of it."""
    journal = sweep_dir / Artifact.report_journal
    if not journal.exists():
        return
    try:
        parent = replay_sweep_end(journal, store.uri)
    except Exception as exc:  # kept for `specexp.upload`; this sweep goes on
        failure.log_traceback(exc)
        # Out of the way of this run's journal, where the upload still finds it.
        aside = sweep_dir / f"unpublished-{now_ms()}"
        aside.mkdir()
        kept = journal.rename(aside / journal.name)
        say(
            f"[yellow]the report an earlier run of this sweep left could not be published "
            f"({escape(failure.one_line(exc))}); kept as {kept}: publish it with "
            f"python -m specexp.upload {sweep_dir}[/]"
        )
        return
    say(f"published the report an earlier run of this sweep left unpublished, on run {parent}")


def say_left_to_upload(sweep_dir: Path, journals: Sequence[Path]) -> None:
    """What of the sweep did not reach its store, and the command that puts it there (the
    sweep's last line)."""
    kinds = sorted({j.name for j in journals})
    console.print(
        f"[bold yellow]not in the MLflow store:[/] {len(journals)} journal(s) under "
        f"{escape(str(sweep_dir))} ({', '.join(kinds)}); put them there with:\n"
        f"  python -m specexp.upload {escape(str(sweep_dir))} [--tracking-uri URI]"
    )


def say_refused(plan: Plan, errors: Sequence[str], jobs: int) -> None:
    """Why the sweep is refused before anything launches."""
    for error in errors:
        console.print(f"[red]config error:[/] {escape(error)}")
    what = (
        f"{len(plan.errors)} of {jobs} jobs cannot run"
        if plan.errors
        else "hydra/launcher cannot run this sweep as configured"
    )
    console.print(f"[red]{what}; nothing was launched[/]")

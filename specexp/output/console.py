"""The console observer: a job's events as the terminal shows them - a spinner while it
prepares, the expected duration, the server's start, a progress bar request by request, a
setting that did not engage, the summary, a failure in one line."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

from rich.markup import escape

from specexp.core.redaction import redact_text
from specexp.engines.records import Engagement
from specexp.host.job import Job
from specexp.output.terminal.dry_run import print_dry_run
from specexp.output.terminal.job_summary import print_summary
from specexp.output.terminal.progress import print_expected, run_progress
from specexp.output.terminal.screen import console, status
from specexp.run.events import (
    DryRunPlanned,
    JobEvent,
    JobFailed,
    JobFinished,
    JobOpened,
    MeasuringStarted,
    Preparing,
    RequestDone,
    RunMeasured,
    ServerDied,
    ServerReady,
    ServerStarting,
    SettingsReadBack,
    Waiting,
)


class ConsoleObserver:
    """Prints a job's progress and summary. ``earlier_s``: how long the newest finished run
    of the job's configuration took (the expected duration says it), if known."""

    def __init__(self, earlier_s: Optional[float] = None):
        self.earlier_s = earlier_s
        self.job: Optional[Job] = None
        # The live display (a spinner or the runs' progress bar) until the next event.
        self._live = contextlib.ExitStack()
        self._progress: Optional[Any] = None
        self._handlers: dict[type, Callable[[Any], None]] = {
            DryRunPlanned: self._dry_run,
            Preparing: self._preparing,
            Waiting: self._waiting,
            JobOpened: self._opened,
            ServerStarting: self._starting,
            ServerReady: self._ready,
            MeasuringStarted: self._measuring,
            RequestDone: self._request,
            RunMeasured: self._run,
            SettingsReadBack: self._settings,
            JobFinished: self._finished,
            JobFailed: self._failed,
            ServerDied: self._server_died,
        }

    def notify(self, event: JobEvent) -> None:
        if not isinstance(event, (RequestDone, RunMeasured)):  # the runs' bar ends
            self._end_live()
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _end_live(self) -> None:
        self._progress = None
        self._live.close()

    def _dry_run(self, event: DryRunPlanned) -> None:
        print_dry_run(event.job, event.launch, event.resolution)

    def _preparing(self, event: Preparing) -> None:
        self._live.enter_context(status(event.what))

    def _waiting(self, event: Waiting) -> None:
        console.print(event.what)

    def _opened(self, event: JobOpened) -> None:
        self.job = event.job
        print_expected(event.job.config, self.earlier_s)

    def _starting(self, event: ServerStarting) -> None:
        self._live.enter_context(
            status(f"{event.label}starting {event.engine} on {event.host} (log: {event.log_path})")
        )

    def _ready(self, event: ServerReady) -> None:
        if event.reused:
            console.print(f"reusing the sweep's server {event.url} (log: {event.log_path})")
        else:
            console.print(
                f"{event.label}[green]server ready[/] at {event.url} after {event.ready_s:.1f} s"
            )

    def _measuring(self, event: MeasuringStarted) -> None:
        self._progress = self._live.enter_context(run_progress(event.runs, event.requests))

    def _request(self, event: RequestDone) -> None:
        if self._progress is not None:
            self._progress.request_done(event.record)

    def _run(self, event: RunMeasured) -> None:
        if self._progress is not None:
            self._progress.advance(event.result)

    def _settings(self, event: SettingsReadBack) -> None:
        for name, s in event.effective.items():
            if s.status == Engagement.not_engaged:
                console.print(
                    f"[bold red]NOT ENGAGED:[/] {name}={s.requested} was requested but the server "
                    f"ran with {s.actual or 'something else'} ({s.evidence})"
                )

    def _finished(self, event: JobFinished) -> None:
        assert self.job is not None, "a job's events begin with JobOpened"
        print_summary(self.job.config, event.summary, list(event.runs))

    def _server_died(self, event: ServerDied) -> None:
        # One line; the backtrace stays in the log it names.
        then = (
            "the warm-up runs again on a new server"
            if event.warmup
            else "it died at this rate before: the rate counts as failed, and the search goes "
            "on with a new server"
            if event.again
            else "the rate is measured once more on a new server before it counts as failed"
        )
        console.print(
            f"[yellow]server died:[/] {escape(redact_text(event.what))}; {then} "
            f"(log: {escape(str(event.log_path))})"
        )

    def _failed(self, event: JobFailed) -> None:
        console.print(f"[red]{event.what}:[/] {escape(redact_text(event.why))}")
        if event.log_tail:
            console.print(f"[dim]{escape(redact_text(event.log_tail))}[/]")

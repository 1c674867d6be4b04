"""A job under way: how long it should take, said before it starts, and the bar of its
runs."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, Optional

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.schemas.concurrency import (
    ASSUMED_TOK_PER_S_PER_STREAM,
    expected_run_seconds,
    run_requests,
)
from specexp.core.schemas.run import RunConfig
from specexp.output.terminal.screen import console


class _RunProgress:
    """The bar of a job's runs: request by request where a run's requests are counted
    (tok/s of the run so far beside it), run by run otherwise."""

    def __init__(self, progress: Progress, task: Any, requests: Optional[int]):
        self.progress, self.task, self.requests = progress, task, requests
        self._run_started: Optional[float] = None
        self._done = self._tokens = 0

    def request_done(self, record: RequestRecord) -> None:
        """One request ended (a listener of the load client): the bar moves on."""
        if self._run_started is None:
            self._run_started, self._done, self._tokens = record.start_unix, 0, 0
        self._done += 1
        self._tokens += record.output_tokens or 0
        elapsed = max(time.time() - self._run_started, 1e-9)
        kind = "warm-up" if record.warmup else f"run {record.run}"
        self.progress.update(
            self.task,
            advance=1 if self.requests else 0,
            description=f"{kind}: {self._done}/{self.requests or '?'} requests, "
            f"{self._tokens / elapsed:.1f} tok/s",
        )

    def advance(self, result: RunResult) -> None:
        kind = "warm-up" if result.warmup else f"run {result.run}"
        if result.asked_rate is not None:
            kind += f" at {result.asked_rate:.3g} req/s"
        stalled = sum(r.stalled for r in result.records)
        note = (
            f"{kind}: [red]failed[/]"
            if result.faults
            else f"{kind}: {result.tok_per_s:.1f} tok/s"
            + (f", [yellow]{stalled} stalled[/]" if stalled else "")
        )
        # Requests counted in other processes (client workers) are counted here.
        left = (self.requests - self._done) if self.requests else 1
        self.progress.update(self.task, advance=max(left, 0), description=note)
        self._run_started, self._done = None, 0
        if console.is_terminal:  # the bar shows it live; the log gets one line per run
            console.log_only(note)
        else:
            console.print(note)


@contextlib.contextmanager
def run_progress(runs: int, requests: Optional[int] = None) -> Iterator[_RunProgress]:
    """Progress over ``runs`` runs of ``requests`` requests each (None: not known ahead)."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    with progress:
        task = progress.add_task("measuring", total=runs * (requests or 1))
        yield _RunProgress(progress, task, requests)


def duration(seconds: float) -> str:
    return f"{max(1, round(seconds))} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def print_expected(cfg: RunConfig, earlier_s: Optional[float]) -> None:
    """Before a job starts: how long it should take, as an estimate - from an earlier run of
    the same configuration, else from the config at the model's expected rate (or, where the
    model states none, an assumed one), each basis said."""
    if earlier_s is not None:
        console.print(
            f"expected: about {duration(earlier_s)} (an earlier run of this configuration took "
            "that long)"
        )
        return
    stats, workload, level = cfg.stats, cfg.workload, cfg.concurrency
    stated = cfg.model.expected_tok_per_s
    tok_per_s = stated or ASSUMED_TOK_PER_S_PER_STREAM
    per_launch = stats.warmup_runs + (cfg.multirun.part_runs or stats.measured_runs)
    runs = stats.launches * per_launch
    seconds = runs * expected_run_seconds(workload, level, tok_per_s)
    requests = run_requests(workload, level)
    rate = (
        f" at {tok_per_s:g} tok/s per stream (model.expected_tok_per_s)"
        if stated
        else f" at an assumed {tok_per_s:g} tok/s per stream (model.expected_tok_per_s states none)"
    )
    if requests is None:
        what = f"{level.duration_s:g} s"
    elif not level.open_loop:
        what = f"{requests} request(s) of up to {workload.max_tokens} tokens{rate}"
    elif level.rate is not None:
        what = f"{requests} arrivals at {level.rate:g} req/s"
    elif level.search is not None:
        what = (
            f"{requests} arrivals, each run timed at the capacity search's start rate "
            f"{level.search.start_rate:g} req/s (faster rates make shorter runs; a run the "
            "server cannot keep up with lasts until its backlog drains)"
        )
    else:
        what = f"{requests} arrivals at the times they are given"
    if cfg.multirun.part_runs is not None:
        # A sequential comparison's arm: launch after launch until the comparison is
        # decided, from its least launches to its budget (stats.launches).
        least = min(stats.sequential.min_launches, stats.launches)
        console.print(
            f"expected: about {duration(seconds * least / stats.launches)} to "
            f"{duration(seconds)} of measuring, an estimate - {least} to {stats.launches} "
            f"launches (measured until decided) of {per_launch} runs of {what} - plus each "
            "server's start"
        )
        return
    console.print(
        f"expected: about {duration(seconds)} of measuring, an estimate - {runs} runs of {what}"
        " - plus the server's start"
    )

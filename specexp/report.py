"""What a person sees in the terminal: dry-run commands, progress, the end-of-run summary."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

from omegaconf import DictConfig
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from specexp.client import RunResult
from specexp.engines.base import Engine, LaunchSpec
from specexp.stats import Summary
from specexp.tracking import redact_env

# soft_wrap: long lines (commands, paths) stay whole instead of being wrapped mid-word.
console = Console(highlight=False, soft_wrap=True)


def print_dry_run(cfg: DictConfig, launch: LaunchSpec, engine: Engine) -> None:
    version, source = engine.version(cfg)
    console.print(f"[bold]# engine={engine.name} stack={cfg.stack.name} model={cfg.model.name} "
                  f"attention_backend={cfg.attention_backend.name} allreduce_backend={cfg.allreduce_backend.name} "
                  f"speculative={cfg.speculative.method} concurrency={cfg.concurrency.streams}[/]")
    console.print(f"# {engine.name} version: {version or 'unknown'} ({source})")
    env = redact_env(launch.env)
    console.print("# environment set by specexp: " + (", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "(none)"))
    # Plain print: the command must stay one copy-pasteable line, never wrapped by rich.
    print(LaunchSpec(launch.argv, env).shell_line(), flush=True)


@contextlib.contextmanager
def status(message: str) -> Iterator[None]:
    with console.status(message):
        yield


class _RunProgress:
    def __init__(self, progress: Progress, task: Any):
        self.progress, self.task = progress, task

    def advance(self, result: RunResult) -> None:
        kind = "warm-up" if result.warmup else f"run {result.run}"
        note = f"{kind}: {result.tok_per_s:.1f} tok/s" if result.ok else f"{kind}: [red]failed[/]"
        self.progress.update(self.task, advance=1, description=note)
        if not console.is_terminal:  # a log file gets no live bar: one line per run instead
            console.print(note)


@contextlib.contextmanager
def run_progress(total: int) -> Iterator[_RunProgress]:
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=False)
    with progress:
        yield _RunProgress(progress, progress.add_task("measuring", total=total))


def _fmt(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def print_summary(cfg: DictConfig, summary: Optional[Summary], metrics: dict[str, float],
                  runs: list[RunResult], tracker: Any) -> None:
    table = Table(title=f"{cfg.engine.name} / {cfg.model.name} / speculative={cfg.speculative.method} / "
                        f"concurrency={cfg.concurrency.streams}")
    table.add_column("run")
    table.add_column("tok/s", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("TTFT ms", justify="right")
    table.add_column("accept len", justify="right")
    for result in runs:
        ok = [r for r in result.records if r.ok]
        ttft = sum(r.ttft_s or 0 for r in ok) / len(ok) * 1000 if ok else None
        table.add_row("warm-up" if result.warmup else str(result.run), _fmt(result.tok_per_s, 1),
                      str(result.output_tokens), _fmt(ttft, 1), _fmt(result.acceptance_length))
    console.print(table)
    if summary:
        level = int(summary.confidence * 100)
        console.print(f"[bold]tok/s {summary.mean:.2f}[/] ± {summary.std:.2f} (CV {summary.cv:.2%}), "
                      f"{level}% CI [{_fmt(summary.ci_low)}, {_fmt(summary.ci_high)}], n={summary.n}")
        if summary.n > 1 and summary.cv > cfg.stats.cv_warn:
            console.print(f"[yellow]warning:[/] CV {summary.cv:.1%} is above stats.cv_warn={cfg.stats.cv_warn:.0%}: "
                          "the machine was noisy or the runs were too short to trust small differences")
    if "acceptance_length_mean" in metrics:
        console.print(f"acceptance length {metrics['acceptance_length_mean']:.2f}, "
                      f"rate {metrics.get('acceptance_rate_mean', float('nan')):.1%}")
    if tracker:
        console.print(f"MLflow: run {tracker.run_id} (experiment {tracker.experiment_id}) in {tracker.uri}")

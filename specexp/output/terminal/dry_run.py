"""A dry run: the job, how its engine will take it, and the command it would run."""

from __future__ import annotations

from typing import Optional

from rich.markup import escape

from specexp.core.redaction import redact_env, redact_text
from specexp.engines.records import LaunchSpec, Resolution
from specexp.host.job import Job
from specexp.output.terminal.screen import console


def print_dry_run(job: Job, launch: LaunchSpec, resolution: Optional[Resolution]) -> None:
    """The job, how the engine will take it (notes, and its own resolution where the stack's
    interpreter can run it here), then the command."""
    cfg, engine = job.config, job.engine
    version, source = engine.version(job.server)
    console.print(
        f"[bold]# engine={engine.name} stack={cfg.stack.name} model={cfg.model.name} "
        f"attention_backend={cfg.attention_backend.name} allreduce_backend={cfg.allreduce_backend.name} "
        f"speculative={cfg.speculative.method} concurrency={cfg.concurrency.streams}[/]"
    )
    console.print(f"# {engine.name} version: {version or 'unknown'} ({source})")
    env = redact_env(launch.env)
    console.print(
        "# environment set by specexp: "
        + (", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "(none)")
    )
    for note in engine.plan_notes(job.server):
        console.print(f"# [yellow]note:[/] {note}")
    if resolution is None:
        pass  # the engine has none, or its stack's interpreter is not on this machine
    elif resolution.error:
        console.print(f"# resolution not run: {escape(resolution.error)}")
    elif resolution.changed:
        console.print(
            f"# [red]{engine.name} would change:[/] {escape('; '.join(resolution.changed))}"
        )
    elif resolution.ran:
        console.print(f"# {engine.name}'s own resolution keeps the command's settings")
    if resolution is not None and resolution.chosen:
        chosen = ", ".join(f"{k}={v}" for k, v in resolution.chosen)
        console.print(
            f"# [bold]{engine.name} will choose:[/] {escape(chosen)} "
            f"({escape(resolution.chosen_for)})"
        )
    if cfg.engine.url:
        console.print(
            f"# measures the running server at {redact_text(cfg.engine.url)}: nothing is launched"
        )
        return
    # Plain print: the command must stay one copy-pasteable line, never wrapped by rich.
    if not console.quiet:
        print(redact_text(LaunchSpec(launch.argv, env).shell_line()), flush=True)

"""One job: resolve the config, launch the server, warm up, measure, summarise, track.

Raw per-request records are appended to ``requests.jsonl`` in the job's output directory
as they arrive, so nothing measured is lost if the job dies; the same file is logged to
MLflow at the end, with the server log and the exact command.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from specexp import config as config_module
from specexp import report
from specexp.client import LoadClient, RequestRecord, RunResult, session
from specexp.engines import get_engine
from specexp.engines.base import Engine, LaunchSpec
from specexp.server import ServerError, ServerProcess, free_port
from specexp.stats import Summary, percentiles, summarize
from specexp.tinymodels import TinyPairSpec, ensure_pair, pair_paths
from specexp.tracking import Tracker, flatten, redact_env


@dataclass
class JobResult:
    status: str  # FINISHED | FAILED | KILLED | DRY_RUN
    run_id: Optional[str] = None
    summary: Optional[Summary] = None
    runs: list[RunResult] = field(default_factory=list)
    error: Optional[str] = None
    output_dir: Optional[Path] = None


def resolve_model(cfg: DictConfig) -> Optional[TinyPairSpec]:
    """Fill a generated model's paths (deterministic, so dry runs can print them)."""
    if cfg.model.generate is None:
        return None
    spec = TinyPairSpec(**OmegaConf.to_container(cfg.model.generate))
    paths = pair_paths(spec)
    cfg.model.path, cfg.model.draft_path = str(paths.target), str(paths.draft)
    return spec


def prepare(cfg: DictConfig) -> tuple[Engine, Optional[TinyPairSpec]]:
    """Resolve and validate; raises ConfigError before anything launches."""
    engine = get_engine(cfg.engine.name)
    spec = resolve_model(cfg)
    if spec is not None:
        try:
            spec.validate()
        except ValueError as exc:
            raise config_module.ConfigError(f"model.generate: {exc}") from None
    config_module.validate(cfg)
    return engine, spec


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def run_tags(cfg: DictConfig, engine: Engine) -> dict[str, str]:
    return {
        "engine": engine.name,
        "engine_version": engine.version(cfg)[0] or "unknown",
        "stack": cfg.stack.name,
        "model": cfg.model.name,
        "attention_backend": cfg.attention_backend.name,
        "allreduce_backend": cfg.allreduce_backend.name,
        "speculative": cfg.speculative.method,
        "concurrency": str(cfg.concurrency.streams),
        "workload": cfg.workload.name,
        "git_commit": git_commit(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        **{f"stack_version.{k}": str(v) for k, v in cfg.stack.versions.items()},
    }


def run_metrics(result: RunResult) -> dict[str, float]:
    """Metrics of one measured run (logged with the run index as step)."""
    ok = [r for r in result.records if r.ok]
    metrics: dict[str, Any] = {
        "tok_per_s": result.tok_per_s,
        "output_tokens": result.output_tokens,
        "wall_s": result.wall_s,
        "ttft_s": sum(r.ttft_s or 0 for r in ok) / len(ok) if ok else None,
        "acceptance_length": result.acceptance_length,
        "acceptance_rate": result.acceptance_rate,
    }
    itl = [x for r in ok for x in r.itl_s]
    metrics.update({f"itl_{k}_s": v for k, v in percentiles(itl).items()})
    return {k: float(v) for k, v in metrics.items() if v is not None}


def summary_metrics(measured: list[RunResult], confidence: float) -> tuple[Optional[Summary], dict[str, float]]:
    tok = summarize([r.tok_per_s for r in measured], confidence)
    metrics: dict[str, float] = tok.as_dict("tok_per_s") if tok else {}
    ttft = summarize([x for r in measured for x in [rec.ttft_s for rec in r.records if rec.ok] if x], confidence)
    if ttft:
        metrics.update({"ttft_s_mean": ttft.mean, "ttft_s_median": ttft.median})
    itl = [x for r in measured for rec in r.records if rec.ok for x in rec.itl_s]
    metrics.update({f"itl_s_{k}": v for k, v in percentiles(itl).items()})
    for name in ("acceptance_length", "acceptance_rate"):
        values = [getattr(r, name) for r in measured if getattr(r, name) is not None]
        if values:
            metrics[f"{name}_mean"] = sum(values) / len(values)
    metrics["measured_runs"] = float(len(measured))
    return tok, metrics


def run_job(cfg: DictConfig, output_dir: Path) -> JobResult:
    engine, tiny = prepare(cfg)
    host = cfg.engine.host
    port = cfg.engine.port or free_port(host)
    launch = engine.launch_spec(cfg, port)
    if cfg.dry_run:
        report.print_dry_run(cfg, launch, engine)
        return JobResult(status="DRY_RUN", output_dir=output_dir)

    output_dir.mkdir(parents=True, exist_ok=True)
    if tiny is not None:
        with report.status(f"generating model {cfg.model.name} (cached after the first time)"):
            ensure_pair(tiny)
    missing = [p for p in engine.local_files(cfg) if not Path(p).is_file()]
    if missing:
        raise config_module.ConfigError(f"model file not found: {', '.join(missing)}; check model.path / "
                                        f"model.draft_path")
    files = _write_job_files(cfg, launch, output_dir)

    tracker = _start_tracking(cfg, engine)
    result = JobResult(status="FAILED", run_id=tracker.run_id if tracker else None, output_dir=output_dir)
    server = ServerProcess(launch, host, port, engine.health_path, output_dir / "server.log")
    try:
        with report.status(f"starting {engine.name} on {host}:{port} (log: {server.log_path})"):
            server.start()
            ready_s = server.wait_ready(cfg.engine.ready_timeout_s)
        report.console.print(f"[green]server ready[/] after {ready_s:.1f} s")
        if tracker:
            tracker.log_metrics({"server_ready_s": ready_s})
        result.runs = asyncio.run(_measure(cfg, engine, server, files["records"], tracker))
        measured = [r for r in result.runs if not r.warmup]
        failed = [rec for r in result.runs for rec in r.records if not rec.ok]
        if failed:
            raise RuntimeError(f"{len(failed)} request(s) failed; first: {failed[0].error}")
        result.summary, metrics = summary_metrics(measured, cfg.stats.confidence)
        if tracker:
            tracker.log_metrics(metrics)
        result.status = "FINISHED"
        report.print_summary(cfg, result.summary, metrics, result.runs, tracker)
    except ServerError as exc:
        result.error = str(exc)
        report.console.print(f"[red]server failed:[/] {exc}\n[dim]{exc.log_tail}[/]")
        if tracker:
            tracker.set_tags({"failure": exc.reason[:500] or str(exc)[:500]})
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (see __main__): clean up, then stop
        result.status, result.error = "KILLED", "interrupted"
        report.console.print("[yellow]interrupted:[/] stopping the server; records so far are kept")
        raise
    except Exception as exc:  # the run is marked failed; what was measured stays on disk
        result.error = f"{type(exc).__name__}: {exc}"
        report.console.print(f"[red]run failed:[/] {result.error}")
        if tracker:
            tracker.set_tags({"failure": result.error[:500]})
    finally:
        server.stop()
        if tracker:
            tracker.log_artifacts([files["config"], files["command"], files["env"], files["records"],
                                   server.log_path])
            tracker.end(result.status)
    return result


async def _measure(cfg: DictConfig, engine: Engine, server: ServerProcess, records_path: Path,
                   tracker: Optional[Tracker]) -> list[RunResult]:
    client = LoadClient(engine, server.base_url, cfg)
    total = cfg.stats.warmup_runs + cfg.stats.measured_runs
    results: list[RunResult] = []
    with open(records_path, "a", buffering=1) as sink, report.run_progress(total) as progress:

        def write(record: RequestRecord) -> None:
            sink.write(json.dumps(record.to_json()) + "\n")
            sink.flush()
            os.fsync(sink.fileno())

        async with session() as http:
            for index in range(total):
                warmup = index < cfg.stats.warmup_runs
                step = index - cfg.stats.warmup_runs
                result = await client.run(step if not warmup else index, warmup, http, write)
                results.append(result)
                if not warmup and tracker:
                    tracker.log_metrics(run_metrics(result), step=step)
                progress.advance(result)
                if not result.ok:
                    break
    return results


def _write_job_files(cfg: DictConfig, launch: LaunchSpec, output_dir: Path) -> dict[str, Path]:
    files = {
        "config": output_dir / "config.yaml",
        "command": output_dir / "command.txt",
        "env": output_dir / "environment.json",
        "records": output_dir / "requests.jsonl",
    }
    files["config"].write_text(OmegaConf.to_yaml(cfg, resolve=True))
    files["command"].write_text(LaunchSpec(launch.argv, redact_env(launch.env)).shell_line() + "\n")
    files["env"].write_text(json.dumps({"set_by_specexp": redact_env(launch.env),
                                        "inherited": redact_env(dict(os.environ))}, indent=2, sort_keys=True))
    return files


def _start_tracking(cfg: DictConfig, engine: Engine) -> Optional[Tracker]:
    if not cfg.tracking.enabled:
        return None
    tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment)
    name = cfg.tracking.run_name or f"{engine.name}-{cfg.model.name}-{cfg.speculative.method}-c{cfg.concurrency.streams}"
    tracker.start(name, run_tags(cfg, engine))
    params = flatten(OmegaConf.to_container(cfg, resolve=True))
    params = {k: v for k, v in params.items() if not k.startswith(("stack.env.", "engine.env."))}
    params.update({f"stack.env.{k}": v for k, v in redact_env(dict(cfg.stack.env)).items()})
    params.update({f"engine.env.{k}": v for k, v in redact_env(dict(cfg.engine.env)).items()})
    tracker.log_params(params)
    report.console.print(f"MLflow run {tracker.run_id} in {tracker.uri}")
    return tracker

"""``python -m specexp.doctor [overrides]``: will these jobs run as asked? Checked before any
model is loaded or GPU time is spent.

Takes the same overrides as a run, or a sweep (``+sweep=NAME``, comma lists). For each job:
the stack's interpreter, the engine importable there and accepting the composed flags with
its own parser, GPUs visible for the tensor-parallel size, compute capability against
features known to need it, the CUDA libraries the stack needs, and the engine's compiled
kernels importing against the stack's torch. Each check passes, fails with a fix hint, or is
skipped with its reason; the exit code is 1 when any check failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Optional, Protocol, runtime_checkable

from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from rich.table import Table

from specexp import hydra_app
from specexp.core.schemas.allreduce_backend import AllreduceBackend
from specexp.core.schemas.engine import ServerSettings
from specexp.core.schemas.run import RunConfig
from specexp.engines.records import Check, CheckStatus, LaunchSpec
from specexp.engines.resolution import ChoosingEngine, ResolvingEngine, resolutions_from
from specexp.engines.stack import (
    last_line,
    run_in_stack,
    run_programs_with_stack_env,
    stack_python,
)
from specexp.host import capture
from specexp.host.capture import Hardware
from specexp.host.job import Job
from specexp.output.terminal.screen import console
from specexp.sweep.plan import Plan, compose_jobs

PASS, FAIL, SKIP, NOTE = (
    CheckStatus.passed,
    CheckStatus.failed,
    CheckStatus.skipped,
    CheckStatus.noted,
)
# Compute capabilities the features are known to engage on (SGLang 0.5.9's capability maps).
NEEDS_CAPABILITY = {
    AllreduceBackend.flashinfer_fusion: ("9.0", "10.0"),
    AllreduceBackend.torch_symm_mem: ("9.0", "10.0"),
}


class DoctorEngine(Protocol):
    """What the doctor needs of an engine (the doctor owns this interface): how it runs, its
    version and what to know of how it takes the command (the job's)."""

    @property
    def name(self) -> str: ...
    # The server is a module of the stack's Python interpreter (else a native binary).
    @property
    def runs_in_stack_python(self) -> bool: ...
    @property
    def multi_gpu(self) -> bool: ...

    def version(self, server: ServerSettings[Any]) -> tuple[Optional[str], str]: ...
    def plan_notes(self, server: ServerSettings[Any]) -> list[str]: ...


@runtime_checkable
class FlagCheckingEngine(Protocol):
    """An engine with a parse-only mode: its own argument parser run on composed flags."""

    def flag_check_command(
        self, server: ServerSettings[Any], launches: list[LaunchSpec]
    ) -> list[str]:
        """A command that parses each launch's flags without serving and prints a JSON list
        with one error message (or null) per launch."""
        ...


@runtime_checkable
class SelfCheckingEngine(Protocol):
    """An engine with preflight checks of its own (the doctor runs the common ones)."""

    def doctor_checks(self, server: ServerSettings[Any]) -> list[Check]: ...


def check_job(job: Job) -> list[Check]:
    """The checks every engine gets, then the engine's own."""
    engine: DoctorEngine = job.engine
    server, cfg = job.server, job.config
    checks: list[Check] = []
    interpreter = stack_python(server)
    have_python = os.access(interpreter, os.X_OK)
    if engine.runs_in_stack_python:
        checks.append(
            Check(
                "stack interpreter",
                PASS if have_python else FAIL,
                interpreter
                if have_python
                else f"{interpreter} not found: create stack {cfg.stack.name}'s environment there, "
                "or set stack.python",
            )
        )
    launch = job.command.at(cfg.engine.port or 30000)
    if not isinstance(engine, FlagCheckingEngine):
        checks += _binary_checks(engine, server, launch)
    elif not have_python:
        checks.append(
            Check("engine and flags", SKIP, "no stack interpreter to import the engine with")
        )
    else:
        checks += _flag_checks(engine, engine.flag_check_command(server, [launch]), server, launch)
    checks += _gpu_checks(engine, cfg)
    cuda = cfg.stack.versions.get("cuda")
    if cuda and engine.runs_in_stack_python:
        library = f"libnvrtc.so.{str(cuda).split('.')[0]}"
        if not have_python:
            checks.append(
                Check(f"CUDA library {library}", SKIP, "no stack interpreter to load it with")
            )
        else:
            out = run_in_stack(server, f"import ctypes; ctypes.CDLL({library!r})", timeout=60)
            checks.append(
                Check(
                    f"CUDA library {library}",
                    PASS if out.returncode == 0 else FAIL,
                    "loads"
                    if out.returncode == 0
                    else f"{last_line(out.stderr)}: make {library} "
                    "visible (ldconfig, or the stack's LD_LIBRARY_PATH)",
                )
            )
    notes = [Check("how the engine takes it", NOTE, n) for n in engine.plan_notes(server)]
    predicted = (
        engine.predicted_choices(server, [launch]) if isinstance(engine, ChoosingEngine) else None
    )
    if predicted is not None:
        (choices,), basis = predicted
        for setting, value in sorted(choices.items()):
            notes.append(Check(f"{setting} it will choose", NOTE, f"{value} ({basis})"))
    own = engine.doctor_checks(server) if isinstance(engine, SelfCheckingEngine) else []
    return checks + own + notes


def _binary_checks(engine: DoctorEngine, server: ServerSettings, launch: LaunchSpec) -> list[Check]:
    """An engine without a parse-only mode: its binary is there, its flags unchecked."""
    binary, version = launch.argv[0], engine.version(server)[0]
    ok = os.access(binary, os.X_OK)
    return [
        Check(
            "engine",
            PASS if ok else FAIL,
            f"{binary} {version or ''}".strip()
            if ok
            else f"{binary} not found: install {engine.name} into the stack, or set stack.bin_dir",
        ),
        Check("flags", SKIP, f"engine={engine.name} has no parse-only mode"),
    ]


def _flag_checks(
    engine: DoctorEngine, command: list[str], server: ServerSettings, launch: LaunchSpec
) -> list[Check]:
    """The engine importable by the stack's interpreter, its own parser (``command``)
    accepting the launch's flags, and its own resolution keeping them: both programs in one
    start of the interpreter, which imports the engine once (seconds for SGLang or vLLM)."""
    version = engine.version(server)[0]
    commands = [command]
    if isinstance(engine, ResolvingEngine):
        commands.append(engine.resolution_command(server, [launch]))
    parsed, *resolved = run_programs_with_stack_env(server, commands)
    if parsed.returncode != 0:
        return [
            Check(
                "engine importable",
                FAIL,
                f"{last_line(parsed.stderr)}: install {engine.name} "
                f"{version or ''} into {stack_python(server)}",
            )
        ]
    error = json.loads(parsed.stdout.strip().splitlines()[-1])[0]
    checks = [
        Check("engine importable", PASS, f"{engine.name} {version}"),
        Check(
            "flags",
            PASS if error is None else FAIL,
            f"accepted by {engine.name} {version}'s own parser" if error is None else error,
        ),
    ]
    if error is None:
        checks.append(_resolution_check(engine, launch, resolved[0] if resolved else None))
    return checks


def _resolution_check(
    engine: DoctorEngine, launch: LaunchSpec, out: Optional[subprocess.CompletedProcess]
) -> Check:
    """The engine's own resolution of the parsed command (``out``: how its program ended,
    None for an engine without one), run without serving: it must keep every setting the
    command gives."""
    name = "resolution"
    if out is None or not isinstance(engine, ResolvingEngine):
        return Check(name, SKIP, f"engine={engine.name} has no resolution-only mode")
    (resolution,) = resolutions_from(engine, [launch], out)
    if resolution.error:
        return Check(name, FAIL, resolution.error)
    if resolution.changed:
        return Check(name, FAIL, f"{engine.name} would change " + "; ".join(resolution.changed))
    return Check(name, PASS, f"{engine.name}'s own code keeps the command's settings")


def _gpu_checks(engine: DoctorEngine, cfg: RunConfig) -> list[Check]:
    tp = cfg.engine.tensor_parallel_size
    hardware = capture.hardware()
    gpus = int(hardware["gpu_count"])
    # A multi-GPU engine needs its tensor-parallel GPUs; a single-process one the GPUs it
    # is given (engine.gpus: llama.cpp offloading to one); none on a CPU-only stack.
    needed = (
        0
        if cfg.stack.cpu_only or cfg.engine.url
        else max(cfg.engine.gpus, tp if engine.multi_gpu else 0)
    )
    if not needed:
        checks = [Check("GPUs", SKIP, f"engine={engine.name} serves on the CPU (engine.gpus=0)")]
    else:
        why = f"tensor parallel {tp}" if engine.multi_gpu else f"engine.gpus={needed}"
        checks = [
            Check(
                "GPUs",
                PASS if gpus >= needed else FAIL,
                f"{gpus} visible, {why} needs {needed}"
                + (
                    ""
                    if gpus >= needed
                    else ": run on a node with enough GPUs, or check CUDA_VISIBLE_DEVICES"
                ),
            )
        ]
    if needed > 1:
        checks.append(_links_check(hardware, cfg.host.gpu_interconnect))
    allreduce = cfg.allreduce_backend
    wanted = [
        f
        for f in (
            allreduce.name,
            AllreduceBackend.torch_symm_mem if allreduce.torch_symm_mem else None,
        )
        if f in NEEDS_CAPABILITY
    ]
    for feature in wanted:
        capability = hardware.get(Hardware.gpu_compute_capability)
        name = f"compute capability for {feature}"
        if not capability:
            checks.append(Check(name, SKIP, "no GPU to read the capability from"))
            continue
        ok = capability in NEEDS_CAPABILITY[feature]
        engages_on = "/SM".join(c.replace(".", "") for c in NEEDS_CAPABILITY[feature])
        checks.append(
            Check(
                name,
                PASS if ok else FAIL,
                f"SM{capability.replace('.', '')}"
                + (
                    ""
                    if ok
                    else f": {feature} engages on SM{engages_on} only; it may silently do nothing here "
                    "(SM120 needs the capability-map patch)"
                ),
            )
        )
    return checks


def _links_check(hardware: dict[str, str], declared: Optional[str]) -> Check:
    """How the GPUs a server spreads over are linked (``nvidia-smi topo -m``): the verify
    pass of a tensor split all-reduces across them every layer, so over PCIe speculation
    pays for it sooner. A declared host.gpu_interconnect that the links contradict fails."""
    if Hardware.gpu_links not in hardware:
        return Check("GPU links", SKIP, "nvidia-smi topo -m shows no link between GPUs here")
    links = json.loads(hardware[Hardware.gpu_links])
    measured = hardware[Hardware.gpu_interconnect]
    kinds: dict[str, list[str]] = {}
    for pair, link in links.items():
        kinds.setdefault(link, []).append(pair)
    detail = f"{measured}: " + "; ".join(
        f"{link} {', '.join(pairs)}" for link, pairs in sorted(kinds.items())
    )
    if declared and declared != measured:
        return Check(
            "GPU links", FAIL, f"host.gpu_interconnect={declared}, but nvidia-smi says {detail}"
        )
    return Check("GPU links", PASS if measured == "nvlink" else NOTE, detail)


def sweep_plan(overrides: list[str], search: hydra_app.ConfigSearch) -> Plan:
    """The jobs a sweep with these overrides would run (its +sweep params included), composed
    and checked as the sweeper composes them, its configs found where ``search`` says."""
    loader = GlobalHydra.instance().config_loader()
    master = loader.load_configuration(
        "config",
        [*search.overrides, *(o for o in overrides if "," not in o)],
        RunMode.MULTIRUN,
    )
    params = [f"{k}={v}" for k, v in (master.hydra.sweeper.params or {}).items()]
    jobs = hydra_app.sweep_jobs(loader, overrides, params, list(master.concurrency.levels))
    return compose_jobs(hydra_app.sweep_composer(loader, master), jobs)


def main(argv: Optional[list[str]] = None) -> int:
    search, overrides = hydra_app.config_search(sys.argv[1:] if argv is None else argv)
    overrides = [a for a in overrides if a != "-m"]
    hydra_app.register()
    failed = 0
    with hydra_app.composing():
        plan = sweep_plan(overrides, search)
        checked = [(" ".join(j.overrides), check_job(j.job)) for j in plan.jobs]
        refused = [("", [Check("configuration", FAIL, error)]) for error in plan.errors]
        for title, checks in checked + refused:
            table = Table(title=title or "defaults", title_justify="left")
            for column in ("check", "result", "detail"):
                table.add_column(column)
            for check in checks:
                style = {PASS: "green", FAIL: "red", SKIP: "yellow", NOTE: "cyan"}[check.status]
                table.add_row(check.name, f"[{style}]{check.status}[/]", check.detail)
            console.print(table)
            failed += sum(c.status == FAIL for c in checks)
    console.print(
        f"{failed} check(s) failed" if failed else "all checks passed or were skipped with a reason"
    )
    return 1 if failed else 0

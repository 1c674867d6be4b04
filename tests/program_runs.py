"""An engine's programs (specexp/engines/*/programs), run as specexp runs them - a command of
the engine's interpreter, the program and its arguments - but many in one launch of that
interpreter (tests/in_one_interpreter.py), which imports the engine once for all of them."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from typing import Any, Optional

from tests.conftest import REPO

IN_ONE_INTERPRETER = REPO / "tests" / "in_one_interpreter.py"


@dataclass
class ProgramRun:
    """One program's run: what its own process would have ended with."""

    argv: list[str]
    ended: Optional[dict[str, Any]] = None

    def printed(self) -> Any:
        """The JSON the program printed last, as specexp reads it; its stderr where it failed."""
        assert self.ended is not None, "the runs were not started"
        assert self.ended["returncode"] == 0, self.ended["stderr"][-3000:]
        return json.loads(self.ended["stdout"].strip().splitlines()[-1])


@dataclass
class ProgramRuns:
    """Runs added with ``add`` (each an engine's command), started together by ``run``, all
    in one interpreter with one environment."""

    python: str
    env: dict[str, str]
    runs: list[ProgramRun] = field(default_factory=list)

    def add(self, command: list[str]) -> ProgramRun:
        """``command`` as specexp composes it: an interpreter (this one runs instead), the
        program and its arguments."""
        run = ProgramRun(command[1:])
        self.runs.append(run)
        return run

    def run(self) -> None:
        argv = [self.python, str(IN_ONE_INTERPRETER), json.dumps([r.argv for r in self.runs])]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=self.env)
        assert result.returncode == 0, result.stderr[-3000:]
        ended = json.loads(result.stdout.strip().splitlines()[-1])
        for run, end in zip(self.runs, ended, strict=True):
            run.ended = end

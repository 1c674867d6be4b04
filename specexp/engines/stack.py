"""The stack a server runs in: its interpreter and variables, the programs run there, the
versions it holds, and the host's cores a CPU server computes on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Mapping, Optional, Sequence

from specexp.core.schemas.engine import ServerSettings

__all__ = [
    "declared_version",
    "host_cpus",
    "last_line",
    "python_engine_version",
    "python_package_version",
    "run_in_stack",
    "run_programs",
    "run_programs_with_stack_env",
    "run_with_stack_env",
    "server_share",
    "stack_env",
    "stack_python",
    "which",
]


def stack_env(server: ServerSettings) -> dict[str, str]:
    """Variables the server gets from specexp: the stack's, then the engine's."""
    env = {str(k): str(v) for k, v in server.stack.env.items()}
    env.update({str(k): str(v) for k, v in server.engine.env.items()})
    return env


def stack_python(server: ServerSettings) -> str:
    return server.stack.python or sys.executable


def run_with_stack_env(
    server: ServerSettings, command: list[str], timeout: float = 300
) -> subprocess.CompletedProcess:
    """``command`` run with the stack's variables, its output captured."""
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **stack_env(server)},
    )


# Runs several programs in one start of their interpreter (see its docstring).
IN_ONE_INTERPRETER = Path(__file__).resolve().parent / "programs" / "in_one_interpreter.py"


def run_programs_with_stack_env(
    server: ServerSettings, commands: list[list[str]], timeout: float = 300
) -> list[subprocess.CompletedProcess]:
    """Programs of the stack's interpreter, run with its variables (see :func:`run_programs`)."""
    return run_programs(commands, {**os.environ, **stack_env(server)}, timeout)


def run_programs(
    commands: list[list[str]], env: Mapping[str, str], timeout: float = 300
) -> list[subprocess.CompletedProcess]:
    """Programs of one interpreter (``[python, PROGRAM, *ARGS]`` each), run with ``env`` in
    one start of that interpreter, which imports the engine once for all; each ended as its
    own process would have. Where the interpreter itself fails, each program has its failure.
    Programs of different interpreters run one by one."""
    if len({command[0] for command in commands}) != 1:
        return [
            subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
            for command in commands
        ]
    runs = json.dumps([command[1:] for command in commands])
    out = subprocess.run(
        [commands[0][0], str(IN_ONE_INTERPRETER), runs],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    try:
        ended = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
    except (IndexError, ValueError):
        ended = None
    if not isinstance(ended, list) or len(ended) != len(commands):
        return [
            subprocess.CompletedProcess(command, out.returncode or 1, out.stdout, out.stderr)
            for command in commands
        ]
    return [
        subprocess.CompletedProcess(command, end["returncode"], end["stdout"], end["stderr"])
        for command, end in zip(commands, ended, strict=True)
    ]


def run_in_stack(
    server: ServerSettings, code: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``code`` run by the stack's interpreter with the stack's variables."""
    return run_with_stack_env(server, [stack_python(server), "-c", code], timeout)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def declared_version(server: ServerSettings, engine: str) -> Optional[str]:
    """The engine version the stack declares (stack.versions), if it does."""
    declared = server.stack.versions.get(engine)
    return str(declared) if declared else None


def python_engine_version(
    server: ServerSettings, engine: str, stack_packages: Mapping[str, str]
) -> Optional[str]:
    """The version of a Python engine the stack's interpreter can import: of the first of
    its distributions (those ``stack_packages`` file under its name) that is installed."""
    env = tuple(sorted(stack_env(server).items()))
    distributions = [d for d, key in stack_packages.items() if key == engine]
    for distribution in distributions or [engine]:
        found = python_package_version(stack_python(server), distribution, env)
        if found:
            return found
    return None


@cache
def python_package_version(
    python: str, package: str, env_items: tuple[tuple[str, str], ...]
) -> Optional[str]:
    """Version of ``package`` as ``python`` sees it with the stack's variables, or None."""
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    try:
        result = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **dict(env_items)},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def which(binary: str, directory: Optional[str]) -> str:
    """Full path of ``binary`` in ``directory`` (if given) or on PATH; the name itself otherwise."""
    if directory:
        return os.path.join(directory, binary)
    return shutil.which(binary) or binary


def host_cpus(configured: Optional[Sequence[int]]) -> list[str]:
    """The CPU cores this host lends to CPU servers: ``host.cpus`` if set, else those this
    process may run on (its affinity: a Slurm allocation, taskset)."""
    if configured is not None:
        return [str(c) for c in configured]
    return [str(c) for c in sorted(os.sched_getaffinity(0))]


def server_share(lent: int) -> int:
    """Cores a CPU server computes on when its engine's threads are not set: every core the
    host lends but one, which the client measures from (a server on every core shares one
    with the client, which then slows it many-fold); on a one-core host, that core."""
    return max(1, lent - 1)

"""The small interface every inference engine implements.

An engine turns a composed config into an argv list and environment, says how to tell that
the server is ready, how to ask it for one streamed completion, how to read that stream,
and where its speculative-decoding counters are. Everything else (process lifecycle, load
generation, statistics, tracking) is engine-agnostic.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar, Optional

from omegaconf import MISSING

from specexp.config import ConfigError


@dataclass
class EngineConfig:
    """Fields every engine has; engine modules subclass this with their own settings."""

    name: str = MISSING
    host: str = "127.0.0.1"
    # 0 picks a free port at launch.
    port: int = 0
    tensor_parallel_size: int = 1
    # GPUs one server occupies, leased per job from host.gpus (0: a CPU server).
    gpus: int = 0
    # Seconds to wait for readiness; model load time dominates.
    ready_timeout_s: float = 120.0
    # Flags appended verbatim, for options specexp does not model.
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]  # only the variables specexp sets; the rest is inherited

    def shell_line(self) -> str:
        """One copy-pasteable shell line: variables, then the quoted command."""
        assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        return " ".join(assignments + [shlex.join(self.argv)])


@dataclass
class StreamChunk:
    """What one server-sent event contributed to a streamed completion."""

    # Output tokens so far as the server counts them (cumulative), when it says.
    tokens_so_far: Optional[int] = None
    # Tokens in this event, when the server gives per-event counts instead.
    tokens_in_chunk: Optional[int] = None
    done: bool = False
    # Final figures from the server: completion_tokens and speculative statistics.
    final: dict[str, Any] = field(default_factory=dict)


class Engine:
    """Base class; subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    config_class: ClassVar[type]
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[Optional[str]] = "/metrics"
    # Prometheus counters: {our name: metric name}; deltas over a measured run are logged.
    speculative_counters: ClassVar[dict[str, str]] = {}
    # Single-process engines cannot honour tensor parallelism or an allreduce backend.
    multi_gpu: ClassVar[bool] = True
    attention_backends: ClassVar[tuple[str, ...]] = ("auto",)
    allreduce_backends: ClassVar[tuple[str, ...]] = ("auto",)
    speculative_methods: ClassVar[tuple[str, ...]] = ("none",)

    def validate(self, cfg: Any) -> None:
        """Reject what this engine cannot honour, naming the option and the valid choices."""
        choices = {
            "attention_backend": (cfg.attention_backend.name, self.attention_backends),
            "allreduce_backend": (cfg.allreduce_backend.name, self.allreduce_backends),
            "speculative": (cfg.speculative.method, self.speculative_methods),
        }
        for option, (value, allowed) in choices.items():
            if value not in allowed:
                extra = " (it runs in one process, with no collective communication)" if (
                    option == "allreduce_backend" and not self.multi_gpu) else ""
                raise ConfigError(
                    f"{option}={value} is not supported by engine={self.name}{extra}; "
                    f"valid choices: {', '.join(allowed)}"
                )
        if cfg.allreduce_backend.torch_symm_mem and "torch_symm_mem" not in self.allreduce_backends:
            raise ConfigError(f"allreduce_backend.torch_symm_mem=true is not supported by engine={self.name}")
        if not self.multi_gpu and cfg.engine.tensor_parallel_size != 1:
            raise ConfigError(
                f"engine.tensor_parallel_size={cfg.engine.tensor_parallel_size} is not supported by "
                f"engine={self.name}, which serves from one process; use 1"
            )

    def launch_spec(self, cfg: Any, port: int) -> LaunchSpec:
        raise NotImplementedError

    def version(self, cfg: Any) -> tuple[Optional[str], str]:
        """(version, where it came from): the stack's declaration, else what the stack holds."""
        declared = cfg.stack.versions.get(self.name)
        if declared:
            return str(declared), f"declared by stack {cfg.stack.name}"
        found = self.detect_version(cfg)
        return (found, "detected in the stack") if found else (None, "not found in the stack")

    def detect_version(self, cfg: Any) -> Optional[str]:
        """The engine version the stack's interpreter can import (Python engines)."""
        return python_package_version(self.stack_python(cfg), self.name, tuple(sorted(self.stack_env(cfg).items())))

    def local_files(self, cfg: Any) -> list[str]:
        """Files that must exist before launch (weights served from local disk)."""
        return []

    def effective(self, cfg: Any, base_url: str, log_text: str, runs: list) -> dict[str, dict[str, str]]:
        """For each requested setting: what it asked, what the server actually ran with, and
        whether it engaged ("engaged", "not engaged", "unknown"), with the evidence."""
        return {name: setting(requested, "", UNKNOWN, f"engine={self.name} reports nothing on this")
                for name, requested in requested_settings(cfg).items()}

    def flag_check_command(self, cfg: Any, launches: list[LaunchSpec]) -> Optional[list[str]]:
        """A command that runs the engine's own argument parser on each launch without serving
        and prints a JSON list with one error message (or null) per launch; None when the
        engine has no parse-only mode."""
        return None

    def completion_request(self, cfg: Any, prompt: str) -> tuple[str, dict[str, Any]]:
        """Path and JSON body of one streamed completion of ``prompt`` with the workload's settings."""
        raise NotImplementedError

    def parse_event(self, event: dict[str, Any]) -> StreamChunk:
        raise NotImplementedError

    # Helpers shared by engines.
    @staticmethod
    def stack_env(cfg: Any) -> dict[str, str]:
        env = {str(k): str(v) for k, v in cfg.stack.env.items()}
        env.update({str(k): str(v) for k, v in cfg.engine.env.items()})
        return env

    @staticmethod
    def stack_python(cfg: Any) -> str:
        return cfg.stack.python or sys.executable


ENGAGED, NOT_ENGAGED, UNKNOWN = "engaged", "not engaged", "unknown"


def setting(requested: str, actual: str, status: str, evidence: str) -> dict[str, str]:
    return {"requested": requested, "actual": actual, "status": status, "evidence": evidence}


def requested_settings(cfg: Any) -> dict[str, str]:
    return {"attention_backend": cfg.attention_backend.name, "allreduce_backend": cfg.allreduce_backend.name,
            "speculative": cfg.speculative.method}


def speculation_from_counters(cfg: Any, runs: list) -> dict[str, str]:
    """Speculation engaged when the server's draft counters moved during the measured runs."""
    measured = [r for r in runs if not r.warmup]
    if not measured or not any(r.counter_deltas for r in measured):
        return setting(cfg.speculative.method, "", UNKNOWN, "no speculative counters in /metrics")
    drafts = sum(r.counter_deltas.get("drafts", 0.0) for r in measured)
    drafting = drafts > 0
    wanted = cfg.speculative.method != "none"
    return setting(cfg.speculative.method, f"{drafts:.0f} drafts", ENGAGED if drafting == wanted else NOT_ENGAGED,
                   f"draft counter delta over the measured runs: {drafts:.0f}")


@lru_cache(maxsize=None)
def python_package_version(python: str, package: str, env_items: tuple[tuple[str, str], ...]) -> Optional[str]:
    """Version of ``package`` as ``python`` sees it with the stack's variables, or None."""
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    try:
        result = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60,
                                env={**os.environ, **dict(env_items)})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def parse_prometheus(text: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus exposition; enough for the counters we read."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        match = re.match(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if match and not match.group(2):
            try:
                values[match.group(1)] = float(match.group(3))
            except ValueError:
                continue
    return values


def which(binary: str, directory: Optional[str]) -> str:
    """Full path of ``binary`` in ``directory`` (if given) or on PATH; the name itself otherwise."""
    if directory:
        return os.path.join(directory, binary)
    from shutil import which as shutil_which

    return shutil_which(binary) or binary

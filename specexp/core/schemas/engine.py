"""The engine config group: the fields every engine's settings have (each engine plugin
subclasses :class:`EngineConfig`), and :class:`ServerSettings`, what an engine is told."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Generic, Optional, TypeVar

from omegaconf import MISSING

from specexp.core.schemas.allreduce_backend import AllreduceBackendConfig
from specexp.core.schemas.attention_backend import AttentionBackendConfig
from specexp.core.schemas.checks import ConfigError, at_least
from specexp.core.schemas.host import HostConfig
from specexp.core.schemas.model import ModelConfig
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.schemas.stack import StackConfig
from specexp.core.schemas.workload import CacheUse, PromptReuse


@dataclass
class EngineConfig:
    """Fields every engine has; each engine module subclasses this with its own settings."""

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
    # A running server to measure (http[s]://host:port) instead of starting one: nothing is
    # launched, and what specexp cannot see of a server it did not start is reported unknown.
    url: Optional[str] = None
    # The environment variable that holds the server's API key, sent as a bearer token; the
    # key itself is never written anywhere.
    api_key_env: Optional[str] = None

    def __post_init__(self) -> None:
        if self.url is not None and not re.fullmatch(r"https?://[^/\s]+/?", self.url):
            raise ConfigError(
                f"engine.url must be http://HOST:PORT or https://HOST:PORT, got {self.url!r}"
            )
        at_least("engine", 0, gpus=self.gpus, port=self.port)
        at_least("engine", 1, tensor_parallel_size=self.tensor_parallel_size)
        if self.port > 65535 or self.ready_timeout_s <= 0:
            raise ConfigError(
                f"engine.port must be 0..65535 and engine.ready_timeout_s > 0, got {self.port} "
                f"and {self.ready_timeout_s}"
            )


# The engine's own EngineConfig subclass, which each engine module types its settings by.
EngineConfigT = TypeVar("EngineConfigT", bound=EngineConfig)


@dataclass(frozen=True)
class ServerSettings(Generic[EngineConfigT]):
    """What an engine is told: everything that shapes the server, and nothing else."""

    engine: EngineConfigT
    stack: StackConfig
    model: ModelConfig
    attention_backend: AttentionBackendConfig
    allreduce_backend: AllreduceBackendConfig
    speculative: SpeculativeConfig
    # Concurrent streams the server must serve at once (engines that size slots by it).
    streams: int
    # The host's declared GPUs (what engines' own resolution depends on).
    host: Optional[HostConfig] = None
    # Most context one request can take (prompt + max_tokens; engines that split their
    # context among requests size or check it by this).
    request_tokens: int = 0
    # What the caches may carry between runs, and the prompts they would carry
    # (workload.caches, workload.prompts): engines turn caches off or flush them by these.
    caches: CacheUse = CacheUse.none
    prompts: PromptReuse = PromptReuse.fixed

    def requested(self) -> dict[str, str]:
        """The settings whose engagement is checked on the live server."""
        return {
            "attention_backend": self.attention_backend.name,
            "allreduce_backend": self.allreduce_backend.name,
            "speculative": self.speculative.method,
        }

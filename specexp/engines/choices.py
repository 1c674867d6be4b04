"""The settings an engine declares it honours, and the check that refuses the rest before
anything launches, naming the option and the valid choices."""

from __future__ import annotations

from typing import Any, Protocol

from specexp.core.schemas.allreduce_backend import AllreduceBackend
from specexp.core.schemas.attention_backend import AttentionBackend
from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.engine import ServerSettings
from specexp.core.schemas.speculative import NgramVariant, SpeculativeMethod

__all__ = ["DeclaredChoices", "refuse_unsupported"]


class DeclaredChoices(Protocol):
    """What the check needs of an engine: what it declares it honours."""

    @property
    def name(self) -> str: ...
    @property
    def attention_backends(self) -> tuple[AttentionBackend, ...]: ...
    @property
    def allreduce_backends(self) -> tuple[AllreduceBackend, ...]: ...
    @property
    def speculative_methods(self) -> tuple[SpeculativeMethod, ...]: ...
    @property
    def ngram_variants(self) -> tuple[NgramVariant, ...]: ...
    # Serves from several processes: tensor parallelism, an allreduce backend.
    @property
    def multi_gpu(self) -> bool: ...
    @property
    def synthetic_acceptance(self) -> bool: ...
    @property
    def dynamic_speculation(self) -> bool: ...


def refuse_unsupported(engine: DeclaredChoices, server: ServerSettings[Any]) -> None:
    """Reject what ``engine`` cannot honour, naming the option and the valid choices."""
    _refuse_choices(engine, server)
    _refuse_speculation(engine, server)
    _refuse_parallelism(engine, server)


def _refuse_choices(engine: DeclaredChoices, server: ServerSettings[Any]) -> None:
    spec = server.speculative
    choices = {
        "attention_backend": (server.attention_backend.name, engine.attention_backends),
        "allreduce_backend": (server.allreduce_backend.name, engine.allreduce_backends),
        "speculative": (spec.method, engine.speculative_methods),
    }
    for option, (value, allowed) in choices.items():
        if value not in allowed:
            extra = (
                " (it runs in one process, with no collective communication)"
                if (option == "allreduce_backend" and not engine.multi_gpu)
                else ""
            )
            raise ConfigError(
                f"{option}={value} is not supported by engine={engine.name}{extra}; "
                f"valid choices: {', '.join(allowed)}"
            )
    if spec.method == SpeculativeMethod.ngram and spec.ngram_variant not in engine.ngram_variants:
        raise ConfigError(
            f"speculative.ngram_variant={spec.ngram_variant} is not supported by "
            f"engine={engine.name}; valid choices: {', '.join(engine.ngram_variants)}"
        )
    if (
        server.allreduce_backend.torch_symm_mem
        and AllreduceBackend.torch_symm_mem not in engine.allreduce_backends
    ):
        raise ConfigError(
            f"allreduce_backend.torch_symm_mem=true is not supported by engine={engine.name}"
        )


def _refuse_speculation(engine: DeclaredChoices, server: ServerSettings[Any]) -> None:
    spec = server.speculative
    if spec.synthetic_acceptance_length is not None and not engine.synthetic_acceptance:
        raise ConfigError(
            "speculative.synthetic_acceptance_length is not supported by "
            f"engine={engine.name}: it has no setting that pins acceptance; leave it null"
        )
    if spec.switch_off_at is not None and not engine.dynamic_speculation:
        raise ConfigError(
            f"speculative.switch_off_at is not supported by engine={engine.name}: it has no "
            "per-batch-size drafting setting that specexp composes; leave it null"
        )


def _refuse_parallelism(engine: DeclaredChoices, server: ServerSettings[Any]) -> None:
    tp = server.engine.tensor_parallel_size
    if not engine.multi_gpu and tp != 1:
        raise ConfigError(
            f"engine.tensor_parallel_size={tp} is not supported by engine={engine.name}, which "
            "serves from one process; use 1"
        )
    # A server specexp does not start (engine.url) takes none of this host's GPUs.
    launched_here = not server.engine.url and not server.stack.cpu_only
    if engine.multi_gpu and launched_here and server.engine.gpus < tp:
        raise ConfigError(
            f"engine.gpus={server.engine.gpus} cannot hold tensor parallel {tp}; set engine.gpus "
            "to at least engine.tensor_parallel_size"
        )

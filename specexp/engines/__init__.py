"""Engine plugins. Adding an engine: one module here, one entry below, one ``conf/engine`` YAML."""

from __future__ import annotations

from specexp.config import ConfigError
from specexp.engines.base import Engine
from specexp.engines.llamacpp import LlamaCppEngine
from specexp.engines.sglang import SGLangEngine
from specexp.engines.vllm import VLLMEngine

ENGINES: dict[str, Engine] = {engine.name: engine for engine in (LlamaCppEngine(), SGLangEngine(), VLLMEngine())}


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise ConfigError(f"engine={name} is unknown; valid choices: {', '.join(ENGINES)}") from None

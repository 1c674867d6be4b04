"""The stack config group: the environment that launches the server."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING


@dataclass
class StackConfig:
    """The environment that launches the server: interpreter, binaries, variables, versions."""

    name: str = MISSING
    description: str = ""
    # Interpreter for Python-based engines; null means the one running specexp.
    python: Optional[str] = None
    # Directory holding native engine binaries (llama-server); null means discover.
    bin_dir: Optional[str] = None
    env: dict[str, str] = field(default_factory=dict)
    # Versions the stack holds, e.g. {sglang: 0.5.9, cuda: 13.0.1}. The engine's version
    # decides flag spellings; when absent it is read from the stack's interpreter.
    versions: dict[str, str] = field(default_factory=dict)
    # The stack's engines run on the CPU (e.g. vLLM's CPU build): their servers take no GPUs.
    cpu_only: bool = False
    # Engine features the stack's build has although its version does not (patched in), by
    # the engine's feature name (e.g. SGLang's kimi_k25_eagle3).
    backports: list[str] = field(default_factory=list)

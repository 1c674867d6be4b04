"""llama.cpp's ``llama-server``: the real engine that runs on a CPU, with real speculation."""

from specexp.engines.llamacpp.config import LlamaCppConfig, SplitMode
from specexp.engines.llamacpp.engine import LlamaCppEngine

__all__ = ["LlamaCppConfig", "LlamaCppEngine", "SplitMode"]

"""vLLM's OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``)."""

from specexp.engines.vllm.config import VLLMConfig
from specexp.engines.vllm.engine import VLLMEngine

__all__ = ["VLLMConfig", "VLLMEngine"]

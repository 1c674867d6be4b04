"""vLLM's OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from specexp.engines.base import Engine, EngineConfig, LaunchSpec, StreamChunk, speculation_from_counters


@dataclass
class VLLMConfig(EngineConfig):
    name: str = "vllm"
    port: int = 8000
    ready_timeout_s: float = 1800.0
    gpu_memory_utilization: Optional[float] = None
    seed: Optional[int] = None


class VLLMEngine(Engine):
    name = "vllm"
    config_class = VLLMConfig
    attention_backends = ("auto", "flash_attn", "triton", "flashinfer")
    allreduce_backends = ("auto", "nccl", "custom")
    speculative_methods = ("none", "eagle3", "ngram", "draft")
    speculative_counters = {
        "drafts": "vllm:spec_decode_num_drafts_total",
        "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    }
    _attention = {"flash_attn": "FLASH_ATTN", "triton": "TRITON_ATTN", "flashinfer": "FLASHINFER"}
    _method = {"eagle3": "eagle3", "draft": "draft_model", "ngram": "ngram"}

    def launch_spec(self, cfg: Any, port: int) -> LaunchSpec:
        engine, model, spec = cfg.engine, cfg.model, cfg.speculative
        # `vllm serve` resolves the wrong package name in CPU builds; the module works everywhere.
        argv = [self.stack_python(cfg), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(model.path),
                "--tensor-parallel-size", str(engine.tensor_parallel_size),
                "--host", engine.host,
                "--port", str(port)]
        if model.trust_remote_code:
            argv.append("--trust-remote-code")
        if cfg.attention_backend.name != "auto":
            argv += ["--attention-backend", self._attention[cfg.attention_backend.name]]
        if cfg.allreduce_backend.name == "nccl":
            argv.append("--disable-custom-all-reduce")
        if spec.method != "none":
            speculative: dict[str, Any] = {"method": self._method[spec.method],
                                           "num_speculative_tokens": spec.num_draft_tokens}
            if spec.method == "ngram":
                speculative["prompt_lookup_max"] = spec.ngram_size
            else:
                speculative["model"] = str(spec.draft_model)
            argv += ["--speculative-config", json.dumps(speculative, separators=(",", ":"))]
        if engine.gpu_memory_utilization is not None:
            argv += ["--gpu-memory-utilization", str(engine.gpu_memory_utilization)]
        if engine.seed is not None:
            argv += ["--seed", str(engine.seed)]
        return LaunchSpec(argv=argv + list(engine.extra_args), env=self.stack_env(cfg))

    def effective(self, cfg: Any, base_url: str, log_text: str, runs: list) -> dict[str, dict[str, str]]:
        result = super().effective(cfg, base_url, log_text, runs)
        result["speculative"] = speculation_from_counters(cfg, runs)
        return result

    def completion_request(self, cfg: Any, prompt: str) -> tuple[str, dict[str, Any]]:
        workload = cfg.workload
        return "/v1/completions", {
            "model": str(cfg.model.path),
            "prompt": prompt,
            "max_tokens": workload.max_tokens,
            "ignore_eos": workload.ignore_eos,
            "temperature": workload.temperature,
            "seed": workload.seed,
            "stream": True,
            # Stream events are not tokens; the usage block gives the server's count.
            "stream_options": {"include_usage": True},
        }

    def parse_event(self, event: dict[str, Any]) -> StreamChunk:
        usage = event.get("usage")
        if usage and not event.get("choices"):
            return StreamChunk(done=True, final={"completion_tokens": usage.get("completion_tokens"),
                                                 "prompt_tokens": usage.get("prompt_tokens")})
        return StreamChunk()

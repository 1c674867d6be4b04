"""vLLM's OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from specexp.engines.base import (
    Engine,
    LaunchSpec,
    Setting,
    StreamChunk,
    speculation_from_counters,
    stack_env,
    stack_python,
)
from specexp.measurements import RunResult
from specexp.schemas import (
    AllreduceBackend,
    AttentionBackend,
    EngineConfig,
    ServerSettings,
    SpeculativeConfig,
    SpeculativeMethod,
    WorkloadConfig,
)


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
    attention_backends = (
        AttentionBackend.auto,
        AttentionBackend.flash_attn,
        AttentionBackend.triton,
        AttentionBackend.flashinfer,
    )
    allreduce_backends = (AllreduceBackend.auto, AllreduceBackend.nccl, AllreduceBackend.custom)
    speculative_methods = tuple(SpeculativeMethod)
    stack_packages = {"vllm": "vllm"}
    speculative_counters = {
        "drafts": "vllm:spec_decode_num_drafts_total",
        "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    }
    _attention = {"flash_attn": "FLASH_ATTN", "triton": "TRITON_ATTN", "flashinfer": "FLASHINFER"}
    _method = {"eagle3": "eagle3", "draft": "draft_model", "ngram": "ngram"}

    def launch_spec(self, server: ServerSettings, port: int) -> LaunchSpec:
        engine, model, spec = server.engine, server.model, server.speculative
        # `vllm serve` resolves the wrong package name in CPU builds; the module works everywhere.
        argv = [
            stack_python(server),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model.path),
            "--tensor-parallel-size",
            str(engine.tensor_parallel_size),
            "--host",
            engine.host,
            "--port",
            str(port),
        ]
        if model.trust_remote_code:
            argv.append("--trust-remote-code")
        if server.attention_backend.name != AttentionBackend.auto:
            argv += ["--attention-backend", self._attention[server.attention_backend.name]]
        if server.allreduce_backend.name == AllreduceBackend.nccl:
            argv.append("--disable-custom-all-reduce")
        if spec.method != "none":
            speculative: dict[str, Any] = {
                "method": self._method[spec.method],
                "num_speculative_tokens": spec.num_draft_tokens,
            }
            if spec.method == "ngram":
                speculative["prompt_lookup_max"] = spec.ngram_size
            else:
                speculative["model"] = str(spec.draft_model)
            argv += ["--speculative-config", json.dumps(speculative, separators=(",", ":"))]
        if engine.gpu_memory_utilization is not None:
            argv += ["--gpu-memory-utilization", str(engine.gpu_memory_utilization)]
        if engine.seed is not None:
            argv += ["--seed", str(engine.seed)]
        return LaunchSpec(argv=argv + list(engine.extra_args), env=stack_env(server))

    def effective(
        self, server: ServerSettings, base_url: str, log_text: str, runs: Sequence[RunResult]
    ) -> dict[str, Setting]:
        result = super().effective(server, base_url, log_text, runs)
        result["speculative"] = speculation_from_counters(server, runs)
        return result

    def switch_off(
        self, threshold: int, speculative: SpeculativeConfig, max_batch: int
    ) -> dict[str, Any]:
        """K=0 disables drafting for a batch-size range of ``num_speculative_tokens_per_batch_size``."""
        ranges = ([[1, threshold - 1, speculative.num_draft_tokens]] if threshold > 1 else []) + [
            [threshold, max_batch, 0]
        ]
        return {
            "speculative_config": {"num_speculative_tokens_per_batch_size": ranges},
            "note": "merge into --speculative-config; K=0 disables drafting for that batch-size range",
        }

    def completion_request(
        self, server: ServerSettings, workload: WorkloadConfig, prompt: str
    ) -> tuple[str, dict[str, Any]]:
        return "/v1/completions", {
            "model": str(server.model.path),
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
            return StreamChunk(
                done=True,
                final={
                    "completion_tokens": usage.get("completion_tokens"),
                    "prompt_tokens": usage.get("prompt_tokens"),
                },
            )
        return StreamChunk()

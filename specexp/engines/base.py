"""The defaults an engine plugin inherits: what it declares (its settings, backends,
endpoints, counters) and what it does where it says nothing.

No consumer takes this class: each names what it needs in a Protocol of its own - launching
(``host/job.py`` ``LaunchingEngine``), streaming (``serving/stream.py`` ``StreamingEngine``),
the stack capture (``host/capture.py`` ``StackEngine``), the doctor (``doctor_command.py``
``DoctorEngine``), the check of declared choices (``choices.py``) and the engine's own
resolution (``resolution.py``: an optional capability, like the doctor's parse-only flag
check and checks of its own). An engine is told only the
:class:`~specexp.core.schemas.engine.ServerSettings` (and the workload for requests), never the whole
run config. The shared work is in modules of its own: ``stack`` (the stack's interpreter and
variables), ``http``, ``prometheus``, ``evidence`` (what engaged), ``records`` (the values
engines hand their consumers).
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Mapping, Optional, Sequence

from specexp.core.measurements import RunResult
from specexp.core.schemas.allreduce_backend import AllreduceBackend
from specexp.core.schemas.attention_backend import AttentionBackend
from specexp.core.schemas.engine import EngineConfig, EngineConfigT, ServerSettings
from specexp.core.schemas.speculative import NgramVariant, SpeculativeConfig, SpeculativeMethod
from specexp.core.schemas.workload import WorkloadConfig
from specexp.core.tinymodels import ModelFormat
from specexp.engines.choices import refuse_unsupported
from specexp.engines.evidence import unreported
from specexp.engines.prometheus import accounting_figures, gauged_load
from specexp.engines.records import (
    BatchSchedule,
    LaunchSpec,
    Prompt,
    ScheduleSetting,
    ServerCommand,
    ServerLoad,
    Setting,
    StreamChunk,
)
from specexp.engines.stack import declared_version, python_engine_version

__all__ = ["Engine"]


class Engine(Generic[EngineConfigT]):
    """An engine's declarations and defaults, typed by the engine's own config class
    (``server.engine`` is one in every method). A plugin sets the class attributes it needs
    and implements ``server_command``, ``completion_request`` and ``parse_event``."""

    name: ClassVar[str]
    config_class: ClassVar[type[EngineConfig]]
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[Optional[str]] = "/metrics"
    # Prometheus counters: {our name: metric name}; deltas over a measured run are logged.
    speculative_counters: ClassVar[dict[str, str]] = {}
    # The server's own accounting of tokens and time, cumulative Prometheus series:
    # {our name: metric name}; :meth:`server_accounting` reads their deltas over a run.
    accounting_counters: ClassVar[dict[str, str]] = {}
    # Single-process engines cannot honour tensor parallelism or an allreduce backend.
    multi_gpu: ClassVar[bool] = True
    # The server is a module of the stack's Python interpreter (else a native binary).
    runs_in_stack_python: ClassVar[bool] = True
    attention_backends: ClassVar[tuple[AttentionBackend, ...]] = (AttentionBackend.auto,)
    allreduce_backends: ClassVar[tuple[AllreduceBackend, ...]] = (AllreduceBackend.auto,)
    speculative_methods: ClassVar[tuple[SpeculativeMethod, ...]] = (SpeculativeMethod.none,)
    ngram_variants: ClassVar[tuple[NgramVariant, ...]] = (NgramVariant.simple,)
    # How the engine loads weights (a generated model is written so).
    model_format: ClassVar[ModelFormat] = ModelFormat.hf
    # Distributions a stack capture reads, besides torch and triton: {distribution: tag key}.
    stack_packages: ClassVar[dict[str, str]] = {}
    # The server runs on the stack's PyTorch (its CUDA and GPUs are read through it).
    runs_on_torch: ClassVar[bool] = True
    # It serves speculative.switch_off_at: by a per-batch-size drafting setting at launch, or
    # (an engine without one) by the server it launches for the level's load.
    dynamic_speculation: ClassVar[bool] = False
    # Prometheus gauges of the requests the server holds: {"running": name, "waiting": name}.
    load_gauges: ClassVar[dict[str, str]] = {}
    # Its requests can go to a chat endpoint that applies the model's template (workload.chat).
    chat_endpoint: ClassVar[bool] = False
    # A JSON endpoint :meth:`server_load` reads beside /metrics (llama.cpp's /slots), if any.
    state_path: ClassVar[Optional[str]] = None
    # The engine can pin its acceptance (speculative.synthetic_acceptance_length).
    synthetic_acceptance: ClassVar[bool] = False

    # What launching and the run need.

    def validate(self, server: ServerSettings[EngineConfigT]) -> None:
        """Reject what this engine cannot honour, naming the option and the valid choices."""
        refuse_unsupported(self, server)

    def server_command(self, server: ServerSettings[EngineConfigT]) -> ServerCommand:
        """The server's command for these settings, with :data:`~specexp.engines.records.PORT`
        where the port it listens on goes (each launch leases one)."""
        raise NotImplementedError

    def cpu_cores(self, server: ServerSettings[EngineConfigT]) -> Optional[int]:
        """CPU cores a server of this configuration computes on, leased per job: 0 for one
        that computes on GPUs, None for the host's share (``stack.server_share``)."""
        return 0 if server.engine.gpus else None

    def pin_cores(self, launch: LaunchSpec, cores: Sequence[str]) -> None:
        """Fit ``launch`` to the cores leased to it (the server runs with its affinity set to
        them): its thread count, its own thread binding."""

    def local_files(self, server: ServerSettings[EngineConfigT]) -> list[str]:
        """Files that must exist before launch (weights served from local disk)."""
        return []

    def version(self, server: ServerSettings[EngineConfigT]) -> tuple[Optional[str], str]:
        """(version, where it came from): the stack's declaration, else what the stack holds."""
        declared = declared_version(server, self.name)
        if declared:
            return declared, f"declared by stack {server.stack.name}"
        found = self.detect_version(server)
        return (found, "detected in the stack") if found else (None, "not found in the stack")

    def detect_version(self, server: ServerSettings[EngineConfigT]) -> Optional[str]:
        """The engine version the stack's interpreter can import (Python engines)."""
        return python_engine_version(server, self.name, self.stack_packages)

    def plan_notes(self, server: ServerSettings[EngineConfigT]) -> list[str]:
        """What a person should know before the launch about how the engine will take the
        command (dry run and doctor print them)."""
        return []

    def effective(
        self,
        server: ServerSettings[EngineConfigT],
        command: ServerCommand,
        base_url: Optional[str],
        log_text: str,
        runs: Sequence[RunResult],
    ) -> dict[str, Setting]:
        """For each requested setting: what it asked, what the server actually ran with, and
        whether it engaged, with the evidence (``command``: the job's, which a live server's
        own resolution is checked against; ``base_url``: None for a server that ended or
        stopped answering, whose state is then read from its log and counters alone)."""
        return unreported(server, self.name, runs)

    def server_accounting(self, deltas: Mapping[str, float]) -> dict[str, float]:
        """What the server says of a run, from its accounting counters' deltas."""
        return accounting_figures(deltas)

    def pinned_marginals(self, length: float, positions: int) -> Optional[list[float]]:
        """The per-position marginal acceptance the engine pins for a mean ``length`` with
        ``positions`` drafted tokens, where its schedule is known; None otherwise."""
        return None

    def switch_off(
        self, threshold: int, speculative: SpeculativeConfig, max_batch: int
    ) -> ScheduleSetting:
        """The setting that stops drafting from ``threshold`` concurrent requests on, in this
        engine's own terms (dynamic speculation)."""
        return self.schedule(
            BatchSchedule.switch_off(threshold, speculative.num_draft_tokens, max_batch),
            speculative,
        )

    def schedule(self, schedule: BatchSchedule, speculative: SpeculativeConfig) -> ScheduleSetting:
        """``schedule`` (draft tokens by batch size) for ``speculative``'s method in this
        engine's own terms; an engine without one says so and exports nothing."""
        return ScheduleSetting(
            f"engine={self.name} has no setting that changes drafting with the batch size: "
            f"run one server per range ({schedule.describe()})"
        )

    # What the client needs.

    def completion_request(
        self, server: ServerSettings[EngineConfigT], workload: WorkloadConfig, prompt: Prompt
    ) -> tuple[str, dict[str, Any]]:
        """Path and JSON body of one streamed completion of ``prompt`` (text, or token ids)
        with the workload's settings."""
        raise NotImplementedError

    def parse_event(self, event: dict[str, Any]) -> StreamChunk:
        raise NotImplementedError

    def tokenize_request(
        self, server: ServerSettings[EngineConfigT], text: str
    ) -> tuple[str, dict[str, Any]]:
        """Path and JSON body asking the server for its tokens of ``text`` (no special
        tokens); the answer's ``tokens`` holds them. vLLM's and SGLang's shared endpoint."""
        return "/tokenize", {
            "model": str(server.model.path),
            "prompt": text,
            "add_special_tokens": False,
        }

    def stream_fields(self, server: ServerSettings[EngineConfigT], stream: int) -> dict[str, Any]:
        """Fields added to the body of every request stream ``stream`` sends (llama.cpp pins
        each stream to a slot of its own); none by default."""
        return {}

    def server_load(self, metrics: Mapping[str, float], state: Any) -> Optional[ServerLoad]:
        """The server's load from its /metrics samples (and ``state``, the answer of
        :attr:`state_path`); None when it exposes neither gauge."""
        return gauged_load(self.load_gauges, metrics)

    def cache_flush(
        self, server: ServerSettings[EngineConfigT], state: Any
    ) -> list[tuple[str, str]]:
        """Requests (method, path) that empty the caches a run could inherit from the runs
        before it, sent before each run when workload.caches=none and prompts are fresh
        (``state``: the answer of :attr:`state_path`); none by default."""
        return []

    def slot_order(
        self, server: ServerSettings[EngineConfigT], state: Any
    ) -> list[tuple[str, dict[str, Any]]]:
        """Requests (path, JSON body to POST) that put back the order in which the server
        hands out its slots, as a fresh server has it, sent one after another before each
        run when caches are flushed (``state``: the answer of :attr:`state_path`); none by
        default."""
        return []

"""The interface every inference engine implements, and what engines share.

An engine owns everything specexp knows about it: the settings it accepts and their flag
spellings, how to tell that the server is ready, how to ask it for one streamed completion
and read that stream, where its speculative-decoding counters are, what it actually ran
with (engaged or not), the preflight checks it needs, the packages a stack capture reads,
and its own switch-off setting for dynamic speculation. It is told only the
:class:`~specexp.core.schemas.ServerSettings` (and the workload for requests), never the whole
run config. Process lifecycle, load generation, statistics and tracking are engine-agnostic.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from functools import cache
from typing import Any, ClassVar, Generic, Mapping, Optional, Sequence, Union

from specexp.core.measurements import RunResult
from specexp.core.records import check_format
from specexp.core.schemas import (
    AllreduceBackend,
    AttentionBackend,
    CacheUse,
    ConfigError,
    EngineConfig,
    EngineConfigT,
    NgramVariant,
    PromptReuse,
    ServerSettings,
    SpeculativeConfig,
    SpeculativeMethod,
    WorkloadConfig,
)
from specexp.core.tinymodels import ModelFormat

__all__ = [
    "EngineConfig",
    "Engine",
    "LaunchSpec",
    "StreamChunk",
    "Setting",
    "Engagement",
    "Check",
    "CheckStatus",
]


# A prompt as text, or as the server's token ids.
Prompt = Union[str, list[int]]


@dataclass
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]  # only the variables specexp sets; the rest is inherited

    def shell_line(self) -> str:
        """One copy-pasteable shell line: variables, then the quoted command."""
        assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        return " ".join(assignments + [shlex.join(self.argv)])


@dataclass
class StreamChunk:
    """What one server-sent event contributed to a streamed completion."""

    # Output tokens so far as the server counts them (cumulative), when it says.
    tokens_so_far: Optional[int] = None
    # Tokens in this event, when the server gives per-event counts instead.
    tokens_in_chunk: Optional[int] = None
    done: bool = False
    # The text this event carried (outputs are compared across arms by it), or the whole
    # text so far where the server streams it so (SGLang).
    text: str = ""
    text_so_far: Optional[str] = None
    # Final figures from the server: completion_tokens, why it stopped ("finish": "eos",
    # "length" or the engine's own word) and speculative statistics.
    final: dict[str, Any] = field(default_factory=dict)


class Engagement(StrEnum):
    engaged = "engaged"
    not_engaged = "not engaged"
    unknown = "unknown"


SETTING_FORMAT = 1


@dataclass(frozen=True)
class Setting:
    """One requested setting as the live server ran it, with the evidence."""

    requested: str
    actual: str
    status: Engagement
    evidence: str

    def to_json(self) -> dict[str, Any]:
        return {"format_version": SETTING_FORMAT, **{k: str(v) for k, v in asdict(self).items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Setting:
        check_format("effective setting", data, SETTING_FORMAT)
        return cls(data["requested"], data["actual"], Engagement(data["status"]), data["evidence"])


class CheckStatus(StrEnum):
    passed = "pass"
    failed = "fail"
    skipped = "skip"
    noted = "note"  # nothing wrong, something to know


@dataclass(frozen=True)
class Resolution:
    """What the engine's own resolution does to one launch's settings before serving."""

    changed: tuple[str, ...] = ()
    filled: tuple[str, ...] = ()
    # Why the resolution could not be run (its interpreter's last word); None when it ran.
    error: Optional[str] = None
    # Settings the engine chooses by itself where the command leaves them to it (setting ->
    # value), from its own code for the declared hardware, and what that was.
    chosen: tuple[tuple[str, str], ...] = ()
    chosen_for: str = ""
    ran: bool = True  # False: only the choices were predicted


@dataclass(frozen=True)
class ServerLoad:
    """What a server is working on, as its own endpoints say: requests running and waiting.
    Read through the server's own request loop (llama.cpp answers /metrics and /slots from
    it), so an idle reading also means the work after the last request is done."""

    running: float
    waiting: float

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.waiting == 0

    def describe(self) -> str:
        return f"{self.running:.0f} request(s) running, {self.waiting:.0f} waiting"


@dataclass(frozen=True)
class Check:
    """One preflight check: passed, failed with a fix hint, or skipped with its reason."""

    name: str
    status: CheckStatus
    detail: str


def host_cpus(configured: Optional[Sequence[int]]) -> list[str]:
    """The CPU cores this host lends to CPU servers: ``host.cpus`` if set, else those this
    process may run on (its affinity: a Slurm allocation, taskset)."""
    if configured is not None:
        return [str(c) for c in configured]
    return [str(c) for c in sorted(os.sched_getaffinity(0))]


def server_share(lent: int) -> int:
    """Cores a CPU server computes on when its engine's threads are not set: every core the
    host lends but one, which the client measures from (a server on every core shares one
    with the client, which then slows it many-fold); on a one-core host, that core."""
    return max(1, lent - 1)


class Engine(Generic[EngineConfigT]):
    """Base class, typed by the engine's own config class (``server.engine`` is one in every
    method); subclasses set the class attributes and implement the methods."""

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
    # The server takes a per-batch-size drafting setting at launch (speculative.switch_off_at).
    dynamic_speculation: ClassVar[bool] = False
    # Prometheus gauges of the requests the server holds: {"running": name, "waiting": name}.
    load_gauges: ClassVar[dict[str, str]] = {}
    # Its requests can go to a chat endpoint that applies the model's template (workload.chat).
    chat_endpoint: ClassVar[bool] = False
    # A JSON endpoint :meth:`server_load` reads beside /metrics (llama.cpp's /slots), if any.
    state_path: ClassVar[Optional[str]] = None
    # The engine can pin its acceptance (speculative.synthetic_acceptance_length).
    synthetic_acceptance: ClassVar[bool] = False

    def pinned_marginals(self, length: float, positions: int) -> Optional[list[float]]:
        """The per-position marginal acceptance the engine pins for a mean ``length`` with
        ``positions`` drafted tokens, where its schedule is known; None otherwise."""
        return None

    def server_load(self, metrics: Mapping[str, float], state: Any) -> Optional[ServerLoad]:
        """The server's load from its /metrics samples (and ``state``, the answer of
        :attr:`state_path`); None when it exposes neither gauge."""
        found = {k: metrics[v] for k, v in self.load_gauges.items() if v in metrics}
        if not found:
            return None
        return ServerLoad(found.get("running", 0.0), found.get("waiting", 0.0))

    def cache_flush(
        self, server: ServerSettings[EngineConfigT], state: Any
    ) -> list[tuple[str, str]]:
        """Requests (method, path) that empty the caches a run could inherit from the runs
        before it, sent before each run when workload.caches=none and prompts are fresh
        (``state``: the answer of :attr:`state_path`); none by default."""
        return []

    def validate(self, server: ServerSettings[EngineConfigT]) -> None:
        """Reject what this engine cannot honour, naming the option and the valid choices."""
        choices = {
            "attention_backend": (server.attention_backend.name, self.attention_backends),
            "allreduce_backend": (server.allreduce_backend.name, self.allreduce_backends),
            "speculative": (server.speculative.method, self.speculative_methods),
        }
        for option, (value, allowed) in choices.items():
            if value not in allowed:
                extra = (
                    " (it runs in one process, with no collective communication)"
                    if (option == "allreduce_backend" and not self.multi_gpu)
                    else ""
                )
                raise ConfigError(
                    f"{option}={value} is not supported by engine={self.name}{extra}; "
                    f"valid choices: {', '.join(allowed)}"
                )
        spec = server.speculative
        if spec.method == SpeculativeMethod.ngram and spec.ngram_variant not in self.ngram_variants:
            raise ConfigError(
                f"speculative.ngram_variant={spec.ngram_variant} is not supported by "
                f"engine={self.name}; valid choices: {', '.join(self.ngram_variants)}"
            )
        if (
            server.allreduce_backend.torch_symm_mem
            and AllreduceBackend.torch_symm_mem not in self.allreduce_backends
        ):
            raise ConfigError(
                f"allreduce_backend.torch_symm_mem=true is not supported by engine={self.name}"
            )
        if spec.synthetic_acceptance_length is not None and not self.synthetic_acceptance:
            raise ConfigError(
                "speculative.synthetic_acceptance_length is not supported by "
                f"engine={self.name}: it has no setting that pins acceptance; leave it null"
            )
        if server.speculative.switch_off_at is not None and not self.dynamic_speculation:
            raise ConfigError(
                f"speculative.switch_off_at is not supported by engine={self.name}: it has no "
                "per-batch-size drafting setting that specexp composes; leave it null"
            )
        tp = server.engine.tensor_parallel_size
        if not self.multi_gpu and tp != 1:
            raise ConfigError(
                f"engine.tensor_parallel_size={tp} is not supported by engine={self.name}, which "
                "serves from one process; use 1"
            )
        # A server specexp does not start (engine.url) takes none of this host's GPUs.
        launched_here = not server.engine.url and not server.stack.cpu_only
        if self.multi_gpu and launched_here and server.engine.gpus < tp:
            raise ConfigError(
                f"engine.gpus={server.engine.gpus} cannot hold tensor parallel {tp}; set engine.gpus "
                "to at least engine.tensor_parallel_size"
            )

    def launch_spec(self, server: ServerSettings[EngineConfigT], port: int) -> LaunchSpec:
        raise NotImplementedError

    def cpu_cores(self, server: ServerSettings[EngineConfigT]) -> Optional[int]:
        """CPU cores a server of this configuration computes on, leased per job: 0 for one
        that computes on GPUs, None for the host's share (:func:`server_share`)."""
        return 0 if server.engine.gpus else None

    def pin_cores(self, launch: LaunchSpec, cores: Sequence[str]) -> None:
        """Fit ``launch`` to the cores leased to it (the server runs with its affinity set to
        them): its thread count, its own thread binding."""

    def version(self, server: ServerSettings[EngineConfigT]) -> tuple[Optional[str], str]:
        """(version, where it came from): the stack's declaration, else what the stack holds."""
        declared = server.stack.versions.get(self.name)
        if declared:
            return str(declared), f"declared by stack {server.stack.name}"
        found = self.detect_version(server)
        return (found, "detected in the stack") if found else (None, "not found in the stack")

    def detect_version(self, server: ServerSettings[EngineConfigT]) -> Optional[str]:
        """The engine version the stack's interpreter can import (Python engines): of the
        first of the engine's distributions (those its stack packages file under its name)
        that is installed."""
        env = tuple(sorted(stack_env(server).items()))
        distributions = [d for d, key in self.stack_packages.items() if key == self.name]
        for distribution in distributions or [self.name]:
            found = python_package_version(stack_python(server), distribution, env)
            if found:
                return found
        return None

    def local_files(self, server: ServerSettings[EngineConfigT]) -> list[str]:
        """Files that must exist before launch (weights served from local disk)."""
        return []

    def plan_notes(self, server: ServerSettings[EngineConfigT]) -> list[str]:
        """What a person should know before the launch about how the engine will take the
        command (dry run and doctor print them)."""
        return []

    def effective(
        self,
        server: ServerSettings[EngineConfigT],
        base_url: str,
        log_text: str,
        runs: Sequence[RunResult],
    ) -> dict[str, Setting]:
        """For each requested setting: what it asked, what the server actually ran with, and
        whether it engaged, with the evidence."""
        settings = {
            name: Setting(
                requested, "", Engagement.unknown, f"engine={self.name} reports nothing on this"
            )
            for name, requested in server.requested().items()
        }
        settings["caches"] = caches_setting(server, runs)
        return settings

    def flag_check_command(
        self, server: ServerSettings[EngineConfigT], launches: list[LaunchSpec]
    ) -> Optional[list[str]]:
        """A command that runs the engine's own argument parser on each launch without serving
        and prints a JSON list with one error message (or null) per launch; None when the
        engine has no parse-only mode."""
        return None

    def resolution_command(
        self, server: ServerSettings[EngineConfigT], launches: list[LaunchSpec]
    ) -> Optional[list[str]]:
        """A command that runs the engine's own resolution of each launch's settings (what it
        fills in or overrides after parsing) without serving, and prints a JSON list with one
        object of resolved settings per launch; None when the engine has no such mode."""
        return None

    def live_resolution(
        self, server: ServerSettings[EngineConfigT], resolved: dict[str, Any], evidence: str
    ) -> Setting:
        """The live server's resolved settings (``resolved``, as ``rewrites`` reads them)
        against the command: engaged when it changed none."""
        changed, _ = self.rewrites(self.launch_spec(server, 0), resolved)
        return Setting(
            "as composed",
            "; ".join(changed) or "as composed",
            Engagement.not_engaged if changed else Engagement.engaged,
            evidence,
        )

    def rewrites(self, launch: LaunchSpec, resolved: dict[str, Any]) -> tuple[list[str], list[str]]:
        """What the engine's resolution (``resolved``: from ``resolution_command`` or the live
        server) changed of the launch's settings, and what it filled in that the launch left
        unset."""
        return [], []

    def predicted_choices(
        self, server: ServerSettings[EngineConfigT], launches: list[LaunchSpec]
    ) -> Optional[tuple[list[dict[str, str]], str]]:
        """What the engine would choose by itself for each launch (an attention backend the
        command leaves on auto), from its own code for the declared hardware, with what was
        declared; None where it cannot be predicted here."""
        return None

    def resolve(
        self, server: ServerSettings[EngineConfigT], launches: list[LaunchSpec]
    ) -> Optional[list[Resolution]]:
        """The engine's own resolution of each launch, run in the stack's interpreter; None
        when the engine has no resolution-only mode or the stack has no interpreter here."""
        command = self.resolution_command(server, launches)
        if command is None or not os.access(command[0], os.X_OK):
            return None
        out = run_with_stack_env(server, command)
        if out.returncode != 0:
            return [Resolution(error=last_line(out.stderr))] * len(launches)
        resolved = json.loads(out.stdout.strip().splitlines()[-1])
        rewrites = [
            self.rewrites(launch, settings)
            for launch, settings in zip(launches, resolved, strict=True)
        ]
        return [Resolution(tuple(changed), tuple(filled)) for changed, filled in rewrites]

    def doctor_checks(self, server: ServerSettings[EngineConfigT]) -> list[Check]:
        """Preflight checks only this engine needs (the doctor runs the common ones)."""
        return []

    def switch_off(
        self, threshold: int, speculative: SpeculativeConfig, max_batch: int
    ) -> dict[str, Any]:
        """The setting that stops drafting from ``threshold`` concurrent requests on, in this
        engine's own terms (dynamic speculation)."""
        return {
            "note": f"engine={self.name} has no per-batch-size switch: serve without speculation from "
            f"{threshold} concurrent streams"
        }

    def server_accounting(self, deltas: Mapping[str, float]) -> dict[str, float]:
        """What the server says of a run, from its accounting counters' deltas, in the
        client's terms: output_tokens, and the means of ttft_s, tpot_s and e2e_s per request
        (and step_s per engine step) where the server keeps them as histogram sum and count."""
        figures = {"output_tokens": deltas["output_tokens"]} if "output_tokens" in deltas else {}
        for name in ("ttft_s", "tpot_s", "e2e_s", "step_s"):
            count = deltas.get(f"{name}_count")
            if count:
                figures[f"{name}_mean"] = deltas[f"{name}_sum"] / count
        return figures

    def stream_fields(self, server: ServerSettings[EngineConfigT], stream: int) -> dict[str, Any]:
        """Fields added to the body of every request stream ``stream`` sends (llama.cpp pins
        each stream to a slot of its own); none by default."""
        return {}

    def completion_request(
        self, server: ServerSettings[EngineConfigT], workload: WorkloadConfig, prompt: Prompt
    ) -> tuple[str, dict[str, Any]]:
        """Path and JSON body of one streamed completion of ``prompt`` (text, or token ids)
        with the workload's settings."""
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

    def parse_event(self, event: dict[str, Any]) -> StreamChunk:
        raise NotImplementedError


def stack_env(server: ServerSettings) -> dict[str, str]:
    """Variables the server gets from specexp: the stack's, then the engine's."""
    env = {str(k): str(v) for k, v in server.stack.env.items()}
    env.update({str(k): str(v) for k, v in server.engine.env.items()})
    return env


def stack_python(server: ServerSettings) -> str:
    return server.stack.python or sys.executable


def run_with_stack_env(
    server: ServerSettings, command: list[str], timeout: float = 300
) -> subprocess.CompletedProcess:
    """``command`` run with the stack's variables, its output captured."""
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **stack_env(server)},
    )


def run_in_stack(
    server: ServerSettings, code: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``code`` run by the stack's interpreter with the stack's variables."""
    return run_with_stack_env(server, [stack_python(server), "-c", code], timeout)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def speculation_from_counters(server: ServerSettings, runs: Sequence[RunResult]) -> Setting:
    """Speculation engaged when the server's draft counters moved during the measured runs.
    With dynamic speculation (switch_off_at) at a level where batches hold that many requests,
    engaged means the switch: drafts are then rare (only while a run's batch fills or drains)."""
    spec = server.speculative
    measured = [r for r in runs if not r.warmup]
    if not measured or not any(r.counter_deltas for r in measured):
        return Setting(spec.method, "", Engagement.unknown, "no speculative counters in /metrics")
    drafts = sum(r.counter_deltas.get("drafts", 0.0) for r in measured)
    evidence = f"draft counter delta over the measured runs: {drafts:.0f}"
    if spec.switch_off_at is not None and server.streams >= spec.switch_off_at:
        tokens = sum(r.output_tokens for r in measured)
        switched_off = drafts <= _STRAGGLER_DRAFTS * tokens
        return Setting(
            spec.method,
            f"{drafts:.0f} drafts for {tokens} tokens (switched off from {spec.switch_off_at} "
            "requests per batch)",
            Engagement.engaged if switched_off else Engagement.not_engaged,
            f"{evidence}; switched off means at most {_STRAGGLER_DRAFTS:.0%} of the tokens",
        )
    drafting = drafts > 0
    wanted = spec.method != SpeculativeMethod.none
    return Setting(
        spec.method,
        f"{drafts:.0f} drafts",
        Engagement.engaged if drafting == wanted else Engagement.not_engaged,
        evidence,
    )


def caches_setting(server: ServerSettings, runs: Sequence[RunResult]) -> Setting:
    """What the measured requests found in the server's prompt cache, as each one reports
    it, against what the workload allows: with fresh prompts and no cache carrying work
    between runs, next to nothing (a shared token or two) - more means earlier requests'
    prompts were served again."""
    requested = f"{server.caches} (prompts={server.prompts})"
    records = [rec for r in runs if not r.warmup for rec in r.records if rec.ok]
    counted = [rec for rec in records if rec.prompt_cached_tokens is not None and rec.prompt_tokens]
    if not counted:
        return Setting(requested, "", Engagement.unknown, "no request reported cached tokens")
    cached = sum(rec.prompt_cached_tokens or 0 for rec in counted)
    total = sum(rec.prompt_tokens or 0 for rec in counted)
    # The figures are evidence; the setting itself reads the same from run to run.
    evidence = (
        f"{cached} of {total} prompt tokens of {len(counted)} measured requests were served "
        "from cache, as each request reported"
    )
    if server.caches != CacheUse.none or server.prompts != PromptReuse.fresh:
        kept = "caches kept" if server.caches == CacheUse.kept else "fixed prompt"
        return Setting(
            requested, f"{kept}: {cached / total:.0%} cached", Engagement.engaged, evidence
        )
    reused = [
        rec
        for rec in counted
        if (rec.prompt_cached_tokens or 0) > fresh_cached_bound(rec.prompt_tokens or 0)
    ]
    if not reused:
        return Setting(
            requested, "no prompt served from earlier requests", Engagement.engaged, evidence
        )
    # Not engaged only when the cache did a material share of the prompt work: more than
    # a fresh prompt may share by chance (a request or two of many is said, not alarmed).
    share = sum(rec.prompt_cached_tokens or 0 for rec in reused) / total
    return Setting(
        requested,
        f"{len(reused)} of {len(counted)} request(s) found earlier prompts cached "
        f"({share:.1%} of prompt tokens)",
        Engagement.not_engaged if share > FRESH_CACHED_SHARE else Engagement.engaged,
        f"{evidence}; a fresh prompt may share at most 10% of its tokens (4 at least)",
    )


# The share of a fresh prompt's tokens it may find cached by chance (a BOS token, a prefix
# word shared with an earlier prompt).
FRESH_CACHED_SHARE = 0.10


def fresh_cached_bound(prompt_tokens: int) -> int:
    """Most prompt tokens a fresh prompt may find cached by chance: 10% of the prompt, 4
    tokens at least."""
    return max(4, int(prompt_tokens * FRESH_CACHED_SHARE))


# Drafts per generated token still expected with drafting switched off at the level run:
# only steps whose batch is below the threshold (a run's first and last steps) draft.
_STRAGGLER_DRAFTS = 0.05


@cache
def python_package_version(
    python: str, package: str, env_items: tuple[tuple[str, str], ...]
) -> Optional[str]:
    """Version of ``package`` as ``python`` sees it with the stack's variables, or None."""
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    try:
        result = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **dict(env_items)},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def is_local(url_or_host: str) -> bool:
    """A loopback or unspecified address (what servers specexp starts listen on), reached
    directly, never through a proxy."""
    host = urllib.parse.urlsplit(url_or_host).hostname if "//" in url_or_host else url_or_host
    if not host:
        return False
    try:
        return is_loopback(host) or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def urlopen(request: Union[str, urllib.request.Request], timeout: float) -> Any:
    """urllib's urlopen, direct to a local server whatever $HTTP_PROXY and the like say
    (urllib would send loopback requests to the proxy); other servers honour them."""
    url = request if isinstance(request, str) else request.full_url
    if is_local(url):
        return _DIRECT.open(request, timeout=timeout)
    return urllib.request.urlopen(request, timeout=timeout)


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_json(base_url: str, paths: tuple[str, ...]) -> Optional[dict]:
    """The first of ``paths`` on the server that answers with JSON, or None."""
    for path in paths:
        try:
            with urlopen(base_url + path, timeout=10) as response:
                return json.loads(response.read())
        except (OSError, ValueError):
            continue
    return None


def parse_prometheus(text: str) -> dict[str, float]:
    """Samples of a Prometheus exposition by metric name, summed over label sets (vLLM labels
    its counters by engine and model: one server's total is their sum). A sample labelled by
    draft position also counts under :func:`position_series` of its name and position."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        match = re.match(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if match:
            try:
                value = float(match.group(3))
            except ValueError:
                continue
            name = match.group(1)
            values[name] = values.get(name, 0.0) + value
            position = re.search(r'(?:^|[{,])\s*position="(\d+)"', match.group(2) or "")
            if position:
                series = position_series(name, int(position.group(1)))
                values[series] = values.get(series, 0.0) + value
    return values


# Draft positions whose accepted-token counters are read. A deeper draft's further positions
# go unread, and the acceptance identity (analysis.acceptance) then fails, saying so.
DRAFT_POSITIONS_READ = 32
# Our names of the per-position counters: accepted_at_position_<i>, i from 0.
ACCEPTED_AT_POSITION = "accepted_at_position_"


def position_series(metric: str, position: int) -> str:
    """The key :func:`parse_prometheus` files one draft position's sample of ``metric`` under."""
    return f'{metric}{{position="{position}"}}'


def position_counters(metric: str) -> dict[str, str]:
    """{our name: series} for a counter labelled by draft position (vLLM's and llama.cpp's
    accepted tokens per position: drafts whose first i+1 tokens were all accepted)."""
    return {
        f"{ACCEPTED_AT_POSITION}{i}": position_series(metric, i)
        for i in range(DRAFT_POSITIONS_READ)
    }


def which(binary: str, directory: Optional[str]) -> str:
    """Full path of ``binary`` in ``directory`` (if given) or on PATH; the name itself otherwise."""
    if directory:
        return os.path.join(directory, binary)
    return shutil.which(binary) or binary

"""What a job is: one run config, typed and checked, with its engine and its identities.

A :class:`Job` is made once from the typed config (:func:`checked`, which the one wiring
point between Hydra and specexp, ``specexp.hydra_app.prepare``, calls): the checks that
span groups run, and the engine checks what it can honour - all before anything launches.
The sweep plans with jobs, the runner runs them, the doctor checks them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Sequence

from specexp.core.datasets import DatasetError
from specexp.core.measurements import RunResult
from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.concurrency import Arrival
from specexp.core.schemas.engine import ServerSettings
from specexp.core.schemas.model import ModelConfig
from specexp.core.schemas.run import RunConfig
from specexp.core.schemas.speculative import SpeculativeMethod
from specexp.core.tinymodels import ModelFormat, pair_paths
from specexp.core.trainedmodels import (
    ModelPackageError,
    file_identity,
    packaged_model,
    packaged_path,
    self_draft_path,
)
from specexp.engines import get_engine
from specexp.engines.base import Engine
from specexp.engines.records import LaunchSpec, Resolution, ServerCommand, Setting
from specexp.engines.resolution import predicted_resolution
from specexp.host.leases import free_port

# Settings that say where and how a job is tracked or planned, not what it measures.
_NOT_MEASURED = ("tracking", "dry_run", "multirun")
# Settings added after fingerprints were first recorded, left out of them while at the value
# that measures what was measured before they existed: earlier runs keep their identity
# (resume finds them).
_LATER_SETTINGS: dict[str, dict[str, Any]] = {
    "model": {"package": None, "self_draft_layers": None, "serve_draft": False},
    "workload": {
        "dataset": None,
        "dataset_format": "auto",
        "dataset_limit": None,
        "chat": False,
        "trace": None,
    },
    "concurrency": {"arrival": "closed", "rate": None, "arrivals": 32, "seed": 0, "search": None},
    "speculative": {
        "ngram_variant": "simple",
        "ngram_min_hits": 1,
        "synthetic_acceptance_length": None,
    },
}


class LaunchingEngine(Protocol):
    """What preparing, launching and measuring a job need of its engine (``run/`` reaches it
    as :attr:`Job.launching`): its checks of a configuration, its command, the cores and files it
    needs, its health endpoint, and what its server ran with and counted."""

    @property
    def name(self) -> str: ...
    @property
    def health_path(self) -> str: ...
    # How the engine loads weights (a generated model is written so).
    @property
    def model_format(self) -> ModelFormat: ...
    # Its requests can go to a chat endpoint that applies the model's template.
    @property
    def chat_endpoint(self) -> bool: ...

    def validate(self, server: ServerSettings[Any]) -> None: ...
    def server_command(self, server: ServerSettings[Any]) -> ServerCommand: ...
    def cpu_cores(self, server: ServerSettings[Any]) -> Optional[int]: ...
    def pin_cores(self, launch: LaunchSpec, cores: Sequence[str]) -> None: ...
    def local_files(self, server: ServerSettings[Any]) -> list[str]: ...
    def effective(
        self,
        server: ServerSettings[Any],
        command: ServerCommand,
        base_url: Optional[str],
        log_text: str,
        runs: Sequence[RunResult],
    ) -> dict[str, Setting]: ...
    def server_accounting(self, deltas: Mapping[str, float]) -> dict[str, float]: ...
    def pinned_marginals(self, length: float, positions: int) -> Optional[list[float]]: ...


@dataclass(frozen=True)
class Job:
    config: RunConfig
    engine: Engine

    @property
    def server(self) -> ServerSettings:
        return self.config.server_settings()

    @property
    def launching(self) -> LaunchingEngine:
        """The engine as preparing, launching and measuring the job use it (``run/``): what
        :class:`LaunchingEngine` names, and mypy holds them to it."""
        return self.engine

    @functools.cached_property
    def command(self) -> ServerCommand:
        """The server's command, built once: each launch takes it at the port it leases."""
        return self.launching.server_command(self.server)

    def config_fingerprint(self) -> str:
        """Identity of what a job measures: everything but tracking and planning settings."""
        return _digest(self._measured())

    def measurement_fingerprint(self) -> str:
        """Identity of what a job measures, whichever published point it stands in for: two
        jobs of a sweep with the same one are the same configuration."""
        data = self._measured()
        data.pop("reference_point")
        return _digest(data)

    def _measured(self) -> dict[str, Any]:
        data = _as_recorded(dataclasses.asdict(self.config))
        for key in _NOT_MEASURED:
            data.pop(key)
        data["stats"].pop("sequential")  # how a comparison is planned, not what a run measures
        # Service levels are read off what was measured, unless they steer a capacity search.
        if self.config.concurrency.search is None:
            data.pop("slo")
        # Facts declared about the model and where the engine's code lies: the model and
        # the command say what is measured.
        data["model"].pop("attention_arch", None)
        data["model"].pop("expected_tok_per_s", None)  # an estimate's basis, not a setting
        data["engine"].pop("sources", None)
        # A level measures the same whichever concurrency option swept it there.
        for key in ("name", "levels"):
            data["concurrency"].pop(key)
        return data

    def server_fingerprint(self) -> str:
        """Identity of the server a job needs: its command (port aside) and environment."""
        launch = self.command.at(0)
        return _digest(
            {"argv": launch.argv, "env": launch.env, "launches": self.config.stats.launches}
        )

    def prompt_namespace(self) -> str:
        """What sets the job's requests apart from those of other jobs on the same server:
        its client-side settings (concurrency, workload, replicate). Fresh prompts are keyed
        by it, so jobs sharing a server never send each other's prompts, while the arms of
        one level (on servers of their own) are sent the same ones: a paired comparison. An
        arm switched off from a load draws prompts of its own: llama.cpp serves it on the
        fixed arms' servers (with speculation below the threshold, without from it)."""
        concurrency = _as_recorded({"concurrency": dataclasses.asdict(self.config.concurrency)})[
            "concurrency"
        ]
        for key in ("name", "levels"):
            concurrency.pop(key)
        return _digest(
            {
                "concurrency": concurrency,
                "workload": _as_recorded({"workload": dataclasses.asdict(self.config.workload)})[
                    "workload"
                ],
                "replicate": self.config.replicate,
                **(
                    {}
                    if self.config.speculative.switch_off_at is None
                    else {"switch_off_at": self.config.speculative.switch_off_at}
                ),
            }
        )

    def planned_launch(self) -> LaunchSpec:
        """The server command as a dry run shows it (a free port when engine.port is 0); the
        launch itself leases its port."""
        return self.command.at(self.config.engine.port or free_port(self.config.engine.host))

    def predicted_resolution(self, launch: LaunchSpec) -> Optional[Resolution]:
        """What the engine's own resolution would do to ``launch``, where the stack's
        interpreter can run it here (the dry run shows it)."""
        return predicted_resolution(self.engine, self.server, launch)

    def request_headers(self) -> dict[str, str]:
        """Headers every request to the server carries: the bearer token from the variable
        engine.api_key_env names, if any."""
        name = self.config.engine.api_key_env
        if not name:
            return {}
        key = os.environ.get(name)
        if not key:
            raise ConfigError(f"engine.api_key_env={name}, and ${name} is not set")
        return {"Authorization": f"Bearer {key}"}

    def factors(self) -> dict[str, str]:
        """The job's swept settings, FACTOR -> VALUE (empty outside a sweep)."""
        return dict(factor.split("=", 1) for factor in self.config.multirun.factors)


def checked(run: RunConfig) -> Job:
    """The typed config as a checked job, its model's files resolved; raises
    :class:`ConfigError` before anything launches (the config is typed once, at the wiring
    point: ``specexp.hydra_app.prepare``)."""
    engine = get_engine(run.engine.name)
    run = with_model_files(run, engine.model_format)
    validate(run)
    engine.validate(run.server_settings())
    return Job(run, engine)


def with_model_files(run: RunConfig, model_format: ModelFormat) -> RunConfig:
    """``run`` with its model's files filled in - a generated pair's in the engine's
    ``model_format`` (deterministic, so that dry runs can print them), a packaged model's, a
    self-draft's, the draft's as the path served (model.serve_draft) - and, where
    speculative.draft_model is not set, the model's own draft for the method."""
    model = dataclasses.replace(run.model)
    if model.generate is not None:
        try:
            model.generate.validate()
        except ValueError as exc:
            raise ConfigError(f"model.generate: {exc}") from None
        paths = pair_paths(model.generate, model_format)
        model.path, model.draft_path = str(paths.target), str(paths.draft)
        if paths.eagle3:
            model.eagle3_draft_path = str(paths.eagle3)
    _trained_model_paths(model)
    if model.serve_draft:
        if not model.draft_path:
            raise ConfigError(f"model.serve_draft: model={model.name} has no draft model")
        model.path = model.draft_path
    speculative = run.speculative
    if speculative.draft_model is None:
        own = {
            SpeculativeMethod.draft: model.draft_path,
            SpeculativeMethod.eagle3: model.eagle3_draft_path,
        }.get(speculative.method)
        speculative = dataclasses.replace(speculative, draft_model=own)
    return dataclasses.replace(run, model=model, speculative=speculative)


def _trained_model_paths(model: ModelConfig) -> None:
    """A packaged model's file and a self-draft's path filled in, as a generated pair's are."""
    try:
        if model.package is not None:
            model.path = str(packaged_path(model.package))
        if model.self_draft_layers is not None:
            if not model.path:
                raise ConfigError(
                    "model.self_draft_layers needs model.path (the target) or model.package"
                )
            target = Path(model.path)
            identity = (
                packaged_model(model.package).sha256 if model.package else file_identity(target)
            )
            model.draft_path = str(self_draft_path(target, int(model.self_draft_layers), identity))
    except ModelPackageError as exc:
        raise ConfigError(str(exc)) from None


def validate(run: RunConfig) -> None:
    """Checks that span config groups (each group's own ranges are its schema's)."""
    spec = run.speculative
    if spec.method in (SpeculativeMethod.eagle3, SpeculativeMethod.draft) and not spec.draft_model:
        source = "eagle3_draft_path" if spec.method == SpeculativeMethod.eagle3 else "draft_path"
        raise ConfigError(
            f"speculative={spec.method} needs a draft model, and model={run.model.name} has no {source}. "
            f"Set speculative.draft_model=PATH, or choose speculative=none|ngram"
            + ("|draft" if spec.method == SpeculativeMethod.eagle3 and run.model.draft_path else "")
        )
    try:
        run.workload.dataset_prompts()  # a bad file is refused before anything launches
    except DatasetError as exc:
        raise ConfigError(str(exc)) from None
    if run.workload.chat and not get_engine(run.engine.name).chat_endpoint:
        raise ConfigError(
            f"workload.chat=true: engine={run.engine.name} is not taught its chat endpoint in "
            "specexp yet; send the prompts as text (workload.chat=false) or use engine=llamacpp"
        )
    if (run.concurrency.arrival == Arrival.trace) != (run.workload.trace is not None):
        raise ConfigError(
            "a trace is replayed with its arrival times: set workload.trace (workload=trace) "
            "and concurrency=trace together"
        )
    if run.workload.trace is not None:
        run.workload.trace.replay()  # a bad file or an empty window is refused here
    if run.concurrency.search is not None and not run.slo.defined:
        raise ConfigError(
            "concurrency.search finds the highest rate that meets the service levels, and "
            f"slo={run.slo.name} sets none: choose slo=interactive|cpu_interactive or set "
            "slo.ttft_s, slo.itl_s or slo.e2e_s"
        )
    tp = run.engine.tensor_parallel_size
    if tp not in run.model.tensor_parallel_sizes:
        raise ConfigError(
            f"engine.tensor_parallel_size={tp} does not fit model={run.model.name}, which needs one of "
            f"{list(run.model.tensor_parallel_sizes)}; set engine.tensor_parallel_size accordingly"
        )


def _as_recorded(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without the later settings that are at their earlier meaning."""
    for group, defaults in _LATER_SETTINGS.items():
        if group in data:
            data[group] = {
                k: v for k, v in data[group].items() if k not in defaults or v != defaults[k]
            }
    return data


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]

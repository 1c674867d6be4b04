"""The one wiring point between Hydra and specexp's typed layers: the config directory, the
schemas in Hydra's ConfigStore (each engine's own among them), the launcher presets'
resolvers, and the task Hydra runs for each job. :func:`register` is called by the
command-line entry points before Hydra composes anything; jobs that Hydra launches in other
processes get the same state with Hydra's singletons."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from rich.markup import escape

from specexp.analysis.results import RunStatus
from specexp.core.schemas import GROUP_SCHEMAS, ConfigError, RunConfig
from specexp.engines import engines
from specexp.host import interrupt
from specexp.host.job import prepare
from specexp.output import failure
from specexp.output.terminal import console
from specexp.run import launchers
from specexp.run.job_run import run_job

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def register() -> None:
    """Put the schemas into Hydra's ConfigStore (YAML options extend them by name) and
    register the resolvers the launcher presets and stacks use."""
    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunConfig)
    for group, node in GROUP_SCHEMAS.items():
        store.store(group=group, name=f"{group}_schema", node=node)
    for engine in engines().values():
        store.store(group="engine", name=f"{engine.name}_schema", node=engine.config_class)
    launchers.register_resolvers()
    launchers.quiet_preset_validation()
    if not OmegaConf.has_resolver("specexp.server_gpus"):
        # GPUs one server takes: its tensor-parallel size, none on a CPU-only stack or for a
        # server specexp does not start (engine.url), whose GPUs are not this host's to lend.
        OmegaConf.register_new_resolver(
            "specexp.server_gpus",
            lambda *, _root_: (
                0
                if _root_.stack.cpu_only or _root_.engine.get("url")
                else _root_.engine.tensor_parallel_size
            ),
        )
    if not OmegaConf.has_resolver("specexp.required"):
        # A value an option cannot do without, named in the error when it is not set.
        OmegaConf.register_new_resolver("specexp.required", _required)
    if not OmegaConf.has_resolver("specexp.project"):
        # Where scripts/install.sh puts engines of their own (.engines/): the project root.
        OmegaConf.register_new_resolver("specexp.project", lambda: str(Path(CONFIG_DIR).parent))


def _required(value: Any, what: str) -> Any:
    if value is None:
        raise ValueError(f"set {what}")
    return value


def run_one(cfg: DictConfig) -> str:
    """Hydra's task: one job from its composed config. A module-level function of an
    importable module, so that launchers pickle it by reference for jobs in other processes."""
    # A launcher's job process may inherit SIGINT ignored (a sweep started with `&` from a
    # script), and an interrupted sweep stops its jobs with SIGINT: make it KeyboardInterrupt.
    signal.signal(signal.SIGINT, interrupt.raise_interrupt)
    try:
        levels = list(cfg.concurrency.levels)
        if HydraConfig.get().mode == RunMode.RUN and len(levels) > 1:
            raise ConfigError(
                f"concurrency={cfg.concurrency.name} measures {len(levels)} levels "
                f"({', '.join(map(str, levels))} streams), one job each: run it as a sweep "
                f"(python -m specexp -m ...), or measure one level with concurrency.streams=N "
                f"concurrency.levels=[]"
            )
        result = run_job(prepare(cfg), Path(HydraConfig.get().runtime.output_dir))
    except ConfigError as exc:
        console.print(f"[red]config error:[/] {escape(str(exc))}")
        sys.exit(2)
    except Exception as exc:  # its runs are ended: one line here, the traceback in specexp.log
        failure.log_traceback(exc)
        console.print(f"[red]failed:[/] {escape(failure.one_line(exc))} (traceback: specexp.log)")
        sys.exit(failure.exit_status(exc))
    if result.status == RunStatus.failed and HydraConfig.get().mode == RunMode.RUN:
        sys.exit(result.exit_status)
    return result.status

"""The one wiring point between Hydra and specexp's typed layers: the config directory, the
schemas in Hydra's ConfigStore (each engine's own among them), the launcher presets'
resolvers, and the task Hydra runs for each job. :func:`register` is called by the
command-line entry points before Hydra composes anything; jobs that Hydra launches in other
processes get the same state with Hydra's singletons."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, EnumNode, OmegaConf
from rich.markup import escape

from specexp.analysis.results import RunStatus
from specexp.core.durable import write_atomic
from specexp.core.redaction import redact_text
from specexp.core.schemas import GROUP_SCHEMAS, ConfigError, RunConfig
from specexp.engines import engines
from specexp.host import interrupt
from specexp.host.job import prepare
from specexp.output import failure, terminal
from specexp.run import launchers
from specexp.run.job_run import run_job
from specexp.run.session import JobResult
from specexp.tracking.store import uri_in_force

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "conf")
# Where a tracked job's output directory says which run it is (specexp.api.load reads it).
RUN_FILE = "run.json"
# Called with each job's result in this process (the Python API collects them: Hydra
# discards what its task returns).
on_result: list[Callable[[JobResult], None]] = []


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
    terminal.quiet_libraries()  # after Hydra configured the job's logging
    hydra_config = HydraConfig.get()
    output_dir = Path(hydra_config.runtime.output_dir)
    with terminal.logged_to(output_dir / f"{hydra_config.job.name}.log"):
        result = _run_logged(cfg, output_dir)
    for listener in on_result:
        listener(result)
    if result.status == RunStatus.failed and hydra_config.mode == RunMode.RUN:
        sys.exit(result.exit_status)
    return result.status


def _run_logged(cfg: DictConfig, output_dir: Path) -> JobResult:
    try:
        levels = list(cfg.concurrency.levels)
        if HydraConfig.get().mode == RunMode.RUN and len(levels) > 1:
            raise ConfigError(
                f"concurrency={cfg.concurrency.name} measures {len(levels)} levels "
                f"({', '.join(map(str, levels))} streams), one job each: run it as a sweep "
                f"(python -m specexp -m ...), or measure one level with concurrency.streams=N "
                f"concurrency.levels=[]"
            )
        result = run_job(prepare(cfg), output_dir)
    except ConfigError as exc:
        terminal.console.print(f"[red]config error:[/] {escape(str(exc))}")
        sys.exit(2)
    except Exception as exc:  # its runs are ended: one line here, the traceback in specexp.log
        failure.log_traceback(exc)
        terminal.console.print(
            f"[red]failed:[/] {escape(failure.one_line(exc))} (traceback: specexp.log)"
        )
        sys.exit(failure.exit_status(exc))
    except BaseException:
        terminal.log_traceback()
        raise
    if result.run_id:
        write_atomic(
            output_dir / RUN_FILE,
            json.dumps(
                {
                    "run_id": result.run_id,
                    "parent_run_id": cfg.multirun.parent_run_id,
                    "experiment": cfg.tracking.experiment,
                    "tracking_uri": redact_text(uri_in_force(cfg.tracking.uri)[0]),
                }
            ),
        )
    return result


@contextlib.contextmanager
def composing() -> Iterator[None]:
    """Hydra's compose API on specexp's config directory, whatever Hydra state the process
    holds (put back after)."""
    held = GlobalHydra.instance().hydra
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            yield
    finally:
        GlobalHydra.instance().hydra = held


def compose_config(overrides: Sequence[str]) -> DictConfig:
    """The config ``python -m specexp OVERRIDES`` would run with (Hydra's own node left out)."""
    register()
    with composing():
        return compose(config_name="config", overrides=list(overrides))


def config_groups() -> dict[str, list[str]]:
    """Each config group of conf/ (``+`` groups such as sweep and case among them) and its
    options, by name."""
    return {
        group.name: sorted(p.stem for p in group.glob("*.yaml"))
        for group in sorted(Path(CONFIG_DIR).iterdir())
        if group.is_dir() and group.name != "hydra"
    }


def config_keys(cfg: DictConfig, prefix: str = "") -> dict[str, Optional[list[str]]]:
    """Every key an override may set, dotted: an enum's with its choices (by name), an open
    mapping's (any key below it may be set) with None, others with an empty list."""
    keys: dict[str, Optional[list[str]]] = {}
    for key in cfg.keys():
        name = f"{prefix}{key!s}"
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and not node._is_none():
            structured = OmegaConf.get_type(node) not in (dict, None)
            keys[name] = [] if structured else None
            keys.update(config_keys(node, f"{name}."))
        elif isinstance(node, EnumNode):
            keys[name] = [member.name for member in node.enum_type]
        else:
            # A node that is None (an optional section left out) takes any key below it.
            keys[name] = None if node is None or node._is_none() else []
    return keys

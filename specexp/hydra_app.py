"""The one wiring point between Hydra and specexp's typed layers: the config directory, the
schemas in Hydra's ConfigStore (each engine's own among them), the launcher presets'
resolvers, and the task Hydra runs for each job. :func:`register` is called by the
command-line entry points before Hydra composes anything; jobs that Hydra launches in other
processes get the same state with Hydra's singletons."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib.resources
import signal
import sys
from enum import StrEnum
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, NoReturn, Optional, Sequence, TypeVar

import hydra
from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import get_overrides_dirname  # as Hydra names a job
from hydra.core.config_loader import ConfigLoader
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import OverrideParseException
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, EnumNode, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException
from rich.markup import escape

from specexp.analysis.results import Artifact, RunStatus
from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.concurrency import ConcurrencyConfig
from specexp.core.schemas.engine import EngineConfig
from specexp.core.schemas.model import ModelConfig
from specexp.core.schemas.run import GROUP_SCHEMAS, RunConfig
from specexp.core.schemas.stats import StatsConfig
from specexp.core.schemas.workload import WorkloadConfig
from specexp.engines import engines
from specexp.host import failure, interrupt
from specexp.host.job import Job, checked
from specexp.options import USAGE_EXIT, NotRun, UsageError
from specexp.output.console import ConsoleObserver
from specexp.output.files import FilesObserver
from specexp.output.terminal import screen
from specexp.output.terminal.loggers import quiet_libraries
from specexp.output.terminal.screen import log_traceback, logged_to
from specexp.run import launchers
from specexp.run.events import JobObserver
from specexp.run.job_run import run_job
from specexp.run.session import JobResult
from specexp.sweep.observer import say_left_to_upload
from specexp.sweep.plan import (
    SET_BY_THE_SWEEP,
    ComposeJob,
    case_mismatches,
    expand_overrides,
    with_levels,
)
from specexp.tracking.address import uri_in_force, uri_problem
from specexp.tracking.observer import MlflowObserver, earlier_duration_s

SectionT = TypeVar("SectionT")

# The config groups and named sweeps: specexp/conf links to the checkout's conf/ (whose sweep/
# links to sweeps/), and a wheel carries a copy there (pyproject.toml's package-data).
CONFIG_DIR = str((Path(__file__).parent / "conf").resolve())


def project_dir() -> Path:
    """The checkout whose conf/ specexp reads; installed from a wheel, the current folder
    (a user's project: its own .engines/, as scripts/install.sh would make them)."""
    checkout = Path(CONFIG_DIR).parent
    return Path.cwd() if checkout == Path(__file__).resolve().parent else checkout


class Observe(StrEnum):
    """The observers a job may have: its files, its MLflow run, the console."""

    files = "files"
    mlflow = "mlflow"
    console = "console"


# The observers of the jobs Hydra runs in this process (the Python API chooses them; the
# command line, and jobs in other processes, take all), and each job's result, as it is
# returned (the Python API collects them: Hydra discards what its task returns).
observing: frozenset[Observe] = frozenset(Observe)
on_result: list[Callable[[JobResult], None]] = []
# Why a job in this process ended without a result, as it ends (the command line prints it,
# the Python API raises it).
on_not_run: list[Callable[[NotRun], None]] = []
# The MLflow observers of the jobs open in this process (a job measured part by part is
# opened once), by output directory: its result carries its run's id.
_tracked: dict[Path, MlflowObserver] = {}


def register() -> None:
    """Put the schemas into Hydra's ConfigStore (YAML options extend them by name) and
    register the resolvers the launcher presets and stacks use."""
    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunConfig)
    for group, node in GROUP_SCHEMAS.items():
        store.store(group=group, name=f"{group}_schema", node=node)
    for engine in engines().values():
        store.store(group="engine", name=f"{engine.name}_schema", node=engine.config_class)
    launchers.quiet_preset_validation()
    if not OmegaConf.has_resolver("specexp.job_minutes"):
        # The launcher presets' time limit, from the job's settings.
        OmegaConf.register_new_resolver("specexp.job_minutes", _job_minutes)
    if not OmegaConf.has_resolver("specexp.gpus_per_node"):
        # The presets' GPUs: a CPU server asks Slurm for none at all (`--gpus-per-node=0`
        # fails on clusters without GRES).
        OmegaConf.register_new_resolver(
            "specexp.gpus_per_node", lambda *, _root_: _root_.engine.gpus or None
        )
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
        OmegaConf.register_new_resolver("specexp.project", lambda: str(project_dir()))


def prepare(cfg: DictConfig) -> Job:
    """The composed config as a checked job, typed once here (nothing below takes a
    ``DictConfig``); raises :class:`ConfigError` before anything launches."""
    return checked(to_run_config(cfg))


def sweep_jobs(
    loader: ConfigLoader, command_line: Sequence[str], params: Sequence[str], levels: Sequence[int]
) -> list[list[str]]:
    """Each job's overrides in a sweep: the command line's, the sweep's own ``params`` after
    them (expand_overrides says why), and a concurrency option's levels (``concurrency=ramp``)
    as a sweep of the streams."""
    given = [*command_line, *params]
    streams = with_levels(given, levels)[len(given) :]
    return expand_overrides([*command_line, *streams], loader, params)


class ComposedOnce(ConfigLoader):
    """A sweep's config loader that composes each job once. The overrides the sweep adds to a
    job's own for each launch (``added``: keys of the schema's leaves - its part, parent run,
    launch budget, runs per part) are set on a copy of the job's composition as Hydra sets
    such overrides, after composing, instead of composing the job again for each launch
    (benchmarks/sweep_composition.py: 142 ms of CPU a launch against 25 ms). Everything else
    is the loader's. tests/unit/test_sweep_composition.py holds it equal to Hydra's
    composition, hydra node and all. One per sweep: its compositions are kept by master
    config and overrides."""

    def __init__(self, loader: ConfigLoader, added: Collection[str]):
        self._loader, self._added = loader, frozenset(added)
        self._composed: dict[tuple[int, tuple[str, ...]], tuple[DictConfig, list[Override]]] = {}

    def __getattr__(self, name: str) -> Any:  # the loader's own, such as its repository
        return getattr(self._loader, name)

    def load_configuration(self, *args: Any, **kwargs: Any) -> DictConfig:
        return self._loader.load_configuration(*args, **kwargs)

    def get_search_path(self) -> Any:
        return self._loader.get_search_path()

    def get_sources(self) -> Any:
        return self._loader.get_sources()

    def list_groups(self, parent_name: str) -> list[str]:
        return self._loader.list_groups(parent_name)

    def get_group_options(self, *args: Any, **kwargs: Any) -> list[str]:
        return self._loader.get_group_options(*args, **kwargs)

    def compute_defaults_list(self, *args: Any, **kwargs: Any) -> Any:
        return self._loader.compute_defaults_list(*args, **kwargs)

    def load_sweep_config(
        self, master_config: DictConfig, sweep_overrides: list[str]
    ) -> DictConfig:
        own = [o for o in sweep_overrides if not self._is_added(o)]
        added = OverridesParser.create().parse_overrides(
            [o for o in sweep_overrides if self._is_added(o)]
        )
        key = (id(master_config), tuple(own))
        if key not in self._composed:
            composed = self._loader.load_sweep_config(master_config, own)
            parsed = OverridesParser.create().parse_overrides(own)
            self._composed[key] = (composed, [o for o in parsed if not o.is_hydra_override()])
        composed, task = self._composed[key]
        cfg = copy.deepcopy(composed)
        for override in added:
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
        lines = {o.input_line: o for o in [*task, *added]}
        ordered = [lines[o] for o in sweep_overrides if o in lines]  # as given, as Hydra keeps them
        cfg.hydra.overrides.task = [o.input_line for o in ordered]
        dirname = cfg.hydra.job.config.override_dirname
        cfg.hydra.job.override_dirname = get_overrides_dirname(
            overrides=ordered,
            exclude_keys=list(dirname.exclude_keys),
            item_sep=dirname.item_sep,
            kv_sep=dirname.kv_sep,
        )
        return cfg

    def _is_added(self, override: str) -> bool:
        key, assigned, _ = override.partition("=")
        return bool(assigned) and key in self._added


def compose_launches_once(launcher: Any, context: HydraContext) -> ComposedOnce:
    """The sweep's loader, a :class:`ComposedOnce` of what the sweep sets in a job
    (SET_BY_THE_SWEEP), which Hydra's in-process launcher composes each launch with too: a
    launch is its job's composition with the sweep's settings. Launchers of other processes
    compose there."""
    loader = ComposedOnce(context.config_loader, SET_BY_THE_SWEEP)
    if launchers.launcher_kind(launcher) == launchers.LauncherKind.in_process:
        launcher.hydra_context = dataclasses.replace(context, config_loader=loader)
    return loader


def sweep_composer(loader: ConfigLoader, master: DictConfig) -> ComposeJob:
    """One job of a sweep as Hydra composes it for the sweeper, typed once (:func:`prepare`)
    and checked against its cases: a swept option whose defaults list names a group choice
    that the job did not get (another config's won) raises ConfigError."""

    def compose_job(overrides: Sequence[str]) -> Job:
        cfg = loader.load_sweep_config(master, list(overrides))
        choices = {str(k): str(v) for k, v in cfg.hydra.runtime.choices.items()}
        with open_dict(cfg):
            del cfg["hydra"]
        job = prepare(cfg)
        factors = job.factors()
        chosen = {o.split("=", 1)[0].lstrip("+~") for o in overrides} - set(factors)
        problems = case_mismatches(loader.repository, factors, choices, chosen)  # type: ignore[attr-defined]
        if problems:
            raise ConfigError("; ".join(problems))
        return job

    return compose_job


def to_run_config(cfg: DictConfig) -> RunConfig:
    """The composed config as its schemas, converted once at the edge; a value out of range
    or a missing mandatory one is a :class:`ConfigError`."""
    try:
        run = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    if not isinstance(run, RunConfig):
        raise ConfigError(f"the composed config is not a run config (got {type(run).__name__})")
    return run


def _job_minutes(*, _root_: DictConfig) -> int:
    """:func:`launchers.job_minutes` of the sections it reads, converted here: the sweep's
    composed config, Hydra's node among it, is not yet a job's to convert whole."""
    return launchers.job_minutes(
        _section(_root_, "stats", StatsConfig),
        _section(_root_, "workload", WorkloadConfig),
        _section(_root_, "concurrency", ConcurrencyConfig),
        _section(_root_, "engine", EngineConfig),
    )


def _section(cfg: DictConfig, name: str, schema: type[SectionT]) -> SectionT:
    section = OmegaConf.to_object(cfg[name])
    if not isinstance(section, schema):
        raise ConfigError(f"{name}: expected a {schema.__name__}, got {type(section).__name__}")
    return section


def _required(value: Any, what: str) -> Any:
    if value is None:
        raise ValueError(f"set {what}")
    return value


def launch(args: Sequence[str]) -> int:
    """Hydra on ``args`` (``python -m specexp``'s: overrides, ``-m`` for a sweep, Hydra's
    flags), each job run by :func:`run_one`, in this process; the exit status the jobs, the
    sweep or Hydra ended with (docs/cli.md's table), never raised. Both doors -
    ``python -m specexp`` and ``specexp run|sweep`` - and the Python API launch here."""
    register()
    argv = sys.argv
    sys.argv = [argv[0] if argv else "specexp", *args]  # what hydra.main parses
    try:
        hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")(run_one)()
    except SystemExit as stopped:
        return _code(stopped.code)
    finally:
        sys.argv = argv
    return 0


def _code(code: object) -> int:
    """A SystemExit's code as an exit status, as the interpreter makes it one."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def run_one(cfg: DictConfig) -> str:
    """Hydra's task: one job from its composed config. A module-level function of an
    importable module, so that launchers pickle it by reference for jobs in other processes."""
    # A launcher's job process may inherit SIGINT ignored (a sweep started with `&` from a
    # script), and an interrupted sweep stops its jobs with SIGINT: make it KeyboardInterrupt.
    signal.signal(signal.SIGINT, interrupt.raise_interrupt)
    quiet_libraries()  # after Hydra configured the job's logging
    hydra_config = HydraConfig.get()
    output_dir = Path(hydra_config.runtime.output_dir)
    log = output_dir / f"{hydra_config.job.name}.log"
    with logged_to(log) if Observe.files in observing else contextlib.nullcontext():
        result = _run_logged(cfg, output_dir)
    for listener in on_result:
        listener(result)
    if hydra_config.mode == RunMode.RUN:
        _exit_as_ended(result, output_dir)
    elif result.status == RunStatus.failed and result.exit_status != failure.RUN_FAILED:
        # A sweep sees its jobs through its launcher's returns: a status of its own (a full
        # disk's) is raised, as a job's error is, for the sweep to exit with.
        raise failure.JobFailed(result.error or "failed", result.exit_status)
    return result.status


def _exit_as_ended(result: JobResult, output_dir: Path) -> None:
    """A single run's exit status when it is not 0: its failure's, else 75 when its record
    went to a journal, not the store (as a sweep's: a script learns it must upload), the
    upload command its last line."""
    journal = output_dir / Artifact.offline_journal
    if Observe.mlflow in observing and journal.exists():
        say_left_to_upload(output_dir, [journal])
        sys.exit(result.exit_status if result.status == RunStatus.failed else failure.NOT_IN_STORE)
    if result.status == RunStatus.failed:
        sys.exit(result.exit_status)


def _run_logged(cfg: DictConfig, output_dir: Path) -> JobResult:
    try:
        run = to_run_config(cfg)
        levels = run.concurrency.levels
        if HydraConfig.get().mode == RunMode.RUN and len(levels) > 1:
            raise ConfigError(
                f"concurrency={run.concurrency.name} measures {len(levels)} levels "
                f"({', '.join(map(str, levels))} streams), one job each: run it as a sweep "
                f"(python -m specexp -m ...), or measure one level with concurrency.streams=N "
                f"concurrency.levels=[]"
            )
        job = checked(run)
        if not job.config.dry_run:
            _check_store(job)
        result = _with_run_id(run_job(job, output_dir, _observers), output_dir)
    except ConfigError as exc:
        _not_run(NotRun(USAGE_EXIT, "config error", str(exc)))
    except Exception as exc:  # its runs are ended: one line, the traceback in specexp.log
        failure.log_traceback(exc)
        why = f"{failure.one_line(exc)} (traceback: specexp.log)"
        _not_run(NotRun(failure.exit_status(exc), "failed", why))
    except BaseException:
        log_traceback()
        raise
    return result


def _not_run(stopped: NotRun) -> NoReturn:
    """The job ends without a result: said to whoever ran it in this process
    (:data:`on_not_run`: the command line prints it, the Python API raises it), and kept in
    the job's log (all a job in a process of its own, a parallel launcher's, has to say it)."""
    screen.console.log_only(escape(str(stopped)))
    for listener in on_not_run:
        listener(stopped)
    sys.exit(stopped.exit_status)


def _check_store(job: Job) -> None:
    """A tracking URI the store cannot take is refused before anything is written."""
    if Observe.mlflow in observing and job.config.tracking.enabled:
        problem = uri_problem(uri_in_force(job.config.tracking.uri)[0])
        if problem:
            raise ConfigError(problem)


def _observers(job: Job, output_dir: Path) -> list[JobObserver]:
    """The observers chosen for this process's jobs (:data:`observing`), in the order they
    hear each event: the console, then the files, then MLflow (which logs the files)."""
    console = Observe.console in observing
    say = screen.console.print if console else screen.console.log_only
    chosen: list[JobObserver] = []
    if console:
        chosen.append(ConsoleObserver(None if job.config.dry_run else earlier_duration_s(job)))
    if Observe.files in observing:
        chosen.append(FilesObserver(say))
    if Observe.mlflow in observing:
        _tracked[output_dir] = tracker = MlflowObserver(say)
        chosen.append(tracker)
    return chosen


def _with_run_id(result: JobResult, output_dir: Path) -> JobResult:
    """The result with its MLflow run's id, if it has one; the output directory only when
    its files are kept."""
    tracker = (
        _tracked.get(output_dir)
        if result.status == RunStatus.measuring
        else _tracked.pop(output_dir, None)
    )
    return dataclasses.replace(
        result,
        run_id=tracker.run_id if tracker else None,
        output_dir=result.output_dir if Observe.files in observing else None,
    )


@dataclasses.dataclass(frozen=True)
class ConfigSearch:
    """Where a command's configs are found: specexp's conf/, then a user's own folders
    (``--config-dir`` and ``hydra.searchpath``'s, in Hydra's order)."""

    searchpath: tuple[str, ...] = ()

    @property
    def overrides(self) -> list[str]:
        """The override that adds the user's folders, for each composition."""
        if not self.searchpath:
            return []
        # Quoted: a folder's name may hold the override grammar's commas and brackets.
        quoted = (f'"{path}"' if "'" in path else f"'{path}'" for path in self.searchpath)
        return [f"hydra.searchpath=[{','.join(quoted)}]"]


# Hydra's option that adds a folder of the user's configs, in both spellings.
CONFIG_DIR_OPTIONS = ("--config-dir", "-cd")
# Hydra's options that replace specexp's config folder or its primary config, which the
# override checks, the doctor and the sweeps compose: refused, naming --config-dir.
REPLACING_OPTIONS = ("--config-path", "-cp", "--config-name", "-cn")


def config_search(args: Sequence[str]) -> tuple[ConfigSearch, list[str]]:
    """``python -m specexp``'s ``args`` split: where they say configs are found (Hydra's
    ``--config-dir DIR``, also as ``-cd DIR`` or ``--config-dir=DIR``, and a
    ``hydra.searchpath=[...]`` override), and the rest. Raises :class:`UsageError` for a
    folder that is not one (Hydra only warns of a search path's), and for Hydra's options
    that replace specexp's own config."""
    config_dirs: list[str] = []
    searchpath: list[str] = []
    rest: list[str] = []
    remaining = iter(args)
    for arg in remaining:
        option, equals, value = arg.partition("=")
        if option in REPLACING_OPTIONS:
            raise UsageError(
                f"{option} replaces specexp's own config (conf/config.yaml); a folder of your "
                "own configs is added with --config-dir DIR (DIR/model/NAME.yaml: model=NAME) "
                "or hydra.searchpath=[file://DIR]"
            )
        if option in CONFIG_DIR_OPTIONS:
            config_dirs.append(value if equals else next(remaining, ""))
            if not config_dirs[-1]:
                raise UsageError(f"{option} needs a folder")
        elif option == "hydra.searchpath":
            searchpath = _searchpath(arg)
        else:
            rest.append(arg)
    # As Hydra: one --config-dir (the last given), searched before hydra.searchpath's folders.
    folders = [f"file://{Path(config_dirs[-1]).resolve()}"] if config_dirs else []
    for given, folder in zip(config_dirs[-1:] + searchpath, folders + searchpath, strict=True):
        if not _folder(folder).is_dir():
            raise UsageError(f"no config folder {given!r} (of --config-dir or hydra.searchpath)")
    return ConfigSearch(tuple(folders + searchpath)), rest


def _searchpath(override: str) -> list[str]:
    """A ``hydra.searchpath=[...]`` override's folders."""
    try:
        value = OverridesParser.create().parse_override(override).value()
    except OverrideParseException as exc:
        raise UsageError(f"not an override: {override!r} ({exc})") from None
    if not isinstance(value, list) or not all(isinstance(path, str) for path in value):
        raise UsageError(f"hydra.searchpath is a list of folders, e.g. [file://DIR]: {override}")
    return value


@contextlib.contextmanager
def composing() -> Iterator[None]:
    """Hydra's compose API on specexp's config directory, whatever Hydra state the process
    holds (put back after); a user's folders are added by :class:`ConfigSearch`'s override."""
    held = GlobalHydra.instance().hydra
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            yield
    finally:
        GlobalHydra.instance().hydra = held


def compose_config(overrides: Sequence[str], search: ConfigSearch = ConfigSearch()) -> DictConfig:
    """The config ``python -m specexp OVERRIDES`` would run with (Hydra's own node left out),
    its configs found where ``search`` says."""
    register()
    with composing():
        return compose(config_name="config", overrides=[*search.overrides, *overrides])


def model_config(name: str) -> ModelConfig:
    """The model option ``name`` (``conf/model/NAME.yaml``) as its schema."""
    model = OmegaConf.to_object(compose_config([f"model={name}"]).model)
    assert isinstance(model, ModelConfig)
    return model


def config_groups(search: ConfigSearch = ConfigSearch()) -> dict[str, list[str]]:
    """Each config group (``+`` groups such as sweep and case among them) and its options, by
    name: conf/'s and those of the user's folders of ``search``."""
    groups: dict[str, set[str]] = {}
    for folder in [Path(CONFIG_DIR), *map(_folder, search.searchpath)]:
        for group in folder.iterdir() if folder.is_dir() else ():
            if group.is_dir() and group.name != "hydra":
                options = {
                    p.name[: -len(".yaml")] for p in group.iterdir() if p.name.endswith(".yaml")
                }
                groups.setdefault(group.name, set()).update(options)
    return {group: sorted(options) for group, options in sorted(groups.items()) if options}


def _folder(searchpath: str) -> Traversable:
    """A search path's folder, as Hydra reads it: ``pkg://PACKAGE[/FOLDER]`` a package's,
    ``file://FOLDER`` or a bare path a file system's."""
    scheme, _, where = searchpath.rpartition("://")
    if scheme != "pkg":
        return Path(where)
    package, _, folder = where.partition("/")
    try:
        return importlib.resources.files(package).joinpath(folder)
    except ModuleNotFoundError:
        return Path(searchpath)  # no such package: no such folder


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

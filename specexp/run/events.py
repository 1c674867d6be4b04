"""What a job says as it goes: typed, frozen events. The measuring code in ``run/`` emits
them and prints, tags and writes nothing itself; observers the caller chooses hear them - the
files observer (``output/files.py``), the MLflow observer (``tracking/observer.py``), the
console observer (``output/console.py``) - or none at all.

Events come between a job's runs, never during one (a write's cost would land in the
timestamps of the streams still running), except :class:`RequestDone`, which only moves a
progress bar."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Mapping, Optional, Protocol, Sequence, TypeVar, Union

from specexp.analysis.results import RunStatus
from specexp.analysis.summary import JobSummary
from specexp.core.measurements import RequestRecord, RunResult
from specexp.engines.records import LaunchSpec, Resolution, Setting
from specexp.host.job import Job


@dataclass(frozen=True)
class DryRunPlanned:
    """A dry run: the server command the job would launch; nothing else happens."""

    job: Job
    launch: LaunchSpec
    resolution: Optional[Resolution]


@dataclass(frozen=True)
class Preparing:
    """Something that takes a while before the job measures (a model generated or checked,
    a self-draft written); it lasts until the next event."""

    what: str


@dataclass(frozen=True)
class Waiting:
    """The job waits for what other jobs on this host hold (GPUs, cores), and says so."""

    what: str


@dataclass(frozen=True)
class JobOpened:
    """The job's checks passed: its files and tracking run may be made now, in
    ``output_dir``."""

    job: Job
    output_dir: Path


@dataclass(frozen=True)
class LaunchesTakenBack:
    """A resumed sweep's job opened with ``launches`` launches its killed attempt completed:
    their runs, settings and launches are said next, as when they were measured."""

    launches: int


@dataclass(frozen=True)
class ServerStarting:
    """A server for the job is being started: ``command`` is its real launch (None: a
    server specexp does not start, measured at ``url``)."""

    label: str  # "launch 2/5: " with several launches, else empty
    engine: str
    host: str
    url: str
    log_path: Path
    command: Optional[LaunchSpec]


@dataclass(frozen=True)
class ServerReady:
    """The server the job measures on: a new one, or the sweep's shared one (``reused``)."""

    launch_index: int
    label: str  # "launch 2/5: " with several launches, else empty
    url: str
    log_path: Path
    reused: bool
    ready_s: float
    started_at: Optional[float]
    cores: tuple[str, ...]
    gpus: Optional[str]


@dataclass(frozen=True)
class MeasuringStarted:
    """``runs`` runs (warm-ups included) of ``requests`` requests each (None: not known
    ahead) begin, measured from ``client_cores`` (empty: not pinned)."""

    runs: int
    requests: Optional[int]
    client_cores: tuple[str, ...]


@dataclass(frozen=True)
class RequestDone:
    """One request ended (the load client's per-request hook)."""

    record: RequestRecord


@dataclass(frozen=True)
class RunMeasured:
    """A warm-up or measured run ended: its requests and figures, the server's accounting of
    it, and where its energy was read (None: not read)."""

    result: RunResult
    accounting: Mapping[str, float]
    energy_source: Optional[str]


@dataclass(frozen=True)
class LaunchMeasured:
    """The measured runs of one launch of the job's server, when the job has several, and
    the launch's time from its server's start to its stop."""

    launch_index: int
    runs: tuple[RunResult, ...]
    wall_s: float


@dataclass(frozen=True)
class SettingsReadBack:
    """How each requested setting ran, as the live server says, after a launch's runs."""

    effective: Mapping[str, Setting]


@dataclass(frozen=True)
class ServerStopped:
    started_at: float
    stopped_at: float


@dataclass(frozen=True)
class JobFinished:
    """The job's summary, its runs, and what else its measurements gave: the acceptance per
    draft position as a document, the replayed trace's statistics."""

    summary: JobSummary
    runs: tuple[RunResult, ...]
    speculation_profile: Optional[Mapping[str, Any]]
    trace_metrics: Mapping[str, float]


@dataclass(frozen=True)
class ServerDied:
    """The server exited or stopped answering mid-run, in a capacity search, which measures
    that rate once more on a new server, and counts it as failed if that one dies too."""

    what: str  # one line: which process, how it ended, during which run, the log's reason
    log_tail: str
    log_path: Path  # where the whole of it is (the backtrace stays there)
    run: int
    warmup: bool
    rate: Optional[float]  # the rate asked of the run
    # False: the first death at this rate (measured again); True: the second (counted failed).
    again: bool = False


@dataclass(frozen=True)
class JobFailed:
    """What failed (``what``: "server failed", "run failed"), why in full and in short (the
    reason a store keeps), and the server log's last lines."""

    what: str
    why: str
    reason: str
    log_tail: str = ""


@dataclass(frozen=True)
class JobClosed:
    """The job's end: its status, and the server logs it wrote to."""

    status: RunStatus
    server_logs: tuple[Path, ...]


JobEvent = Union[
    DryRunPlanned,
    Preparing,
    Waiting,
    JobOpened,
    LaunchesTakenBack,
    ServerStarting,
    ServerReady,
    MeasuringStarted,
    RequestDone,
    RunMeasured,
    LaunchMeasured,
    SettingsReadBack,
    ServerStopped,
    ServerDied,
    JobFinished,
    JobFailed,
    JobClosed,
]


EventT = TypeVar("EventT")
EventT_contra = TypeVar("EventT_contra", contravariant=True)


class Observer(Protocol[EventT_contra]):
    """Hears events (a job's, a sweep's), in the order they come."""

    def notify(self, event: EventT_contra) -> None: ...


class Emitter(Generic[EventT]):
    """Events to their observers, in the order they were given: every observer hears every
    event whatever an earlier one raised (a full disk under a job's files observer still
    lets its MLflow observer end its run), and the first error is raised after."""

    def __init__(self, observers: Sequence[Observer[EventT]] = ()):
        self.observers = tuple(observers)

    def __call__(self, event: EventT) -> None:
        errors = []
        for observer in self.observers:
            try:
                observer.notify(event)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


JobObserver = Observer[JobEvent]
JobEmitter = Emitter[JobEvent]

"""The results contract: what a tracked run holds (tags, metrics, params, artifacts), named
once, written by the runner and the sweep, read back by compare, the sweep report, crossover
and the tests.

A job's run carries its configuration as tags (the factors it was swept over as one JSON
mapping), one :attr:`Metric.tok_per_s` value per measured run (step = run index) and, with
several server launches, one :attr:`Metric.launch_tok_per_s` per launch; each value has its
time (:attr:`Metric.midpoint_unix`, per launch its mean), the axis along which drift is fitted. Reading a run back
gives a :class:`JobRun`, immutable and checked.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Mapping, Optional, Sequence

from specexp.core.capacity import RatePoint
from specexp.core.load_curve import CurvePoint
from specexp.core.records import History, Record, Version
from specexp.core.steady import SteadyState, SteadyVerdict
from specexp.engines.records import Engagement, Setting
from specexp.host.capture import Hardware


class RunKind(StrEnum):
    job = "job"
    sweep = "sweep"
    comparison = "comparison"


class RunStatus(StrEnum):
    """How a job ended (MLflow's own run statuses), or for one part of an interleaved job
    how that part left it; a dry run launches nothing."""

    finished = "FINISHED"
    failed = "FAILED"
    killed = "KILLED"
    dry_run = "DRY_RUN"
    measuring = "MEASURING"  # parts to come
    skipped = "SKIPPED"  # the job ended in an earlier part


class Tag(StrEnum):
    kind = "specexp.kind"
    parent = "mlflow.parentRunId"  # the sweep a job ran in
    process = "specexp.process"  # the process that owns a run: HOST PID START (host.owner)
    factors = "specexp.factors"  # JSON {factor: value} of the settings the sweep varied
    config_fingerprint = "config_fingerprint"
    server_fingerprint = "server_fingerprint"
    server_launch = "server_launch"  # index of the sweep's server launch the job ran on
    server_reused = "server_reused"
    server_url = "server_url"
    server_started_at = "server_started_at"
    server_stopped_at = "server_stopped_at"
    # How the job's runs were placed in time (core.schemas.multirun.JobOrder).
    order = "specexp.order"
    gpus = "gpus"
    cpus = "cpus"  # the cores a CPU server was leased (its affinity)
    client_cpus = "client_cpus"  # the cores the client measured from, off the server's
    warnings = "warnings"
    failure = "failure"
    # The offline journal a run was uploaded from (its id): an upload cut short and run again
    # completes that run rather than making another.
    journal = "specexp.journal"
    not_engaged = "not_engaged"
    # Every requested setting at once (Engaged): "yes", "NO: <settings>", "unknown: <settings>".
    engaged = "engaged"
    # Set by the sweep report on each job it compared: the verdict against the baseline, or
    # in its place a Standing ("baseline" on the baseline's own runs).
    verdict = "verdict"
    reference_point = "reference_point"
    # Named where the hardware is captured.
    hardware = Hardware.hardware.value
    gpu_name = Hardware.gpu_name.value
    gpu_count = Hardware.gpu_count.value
    # On a sweep's parent run.
    jobs = "jobs"
    jobs_to_run = "jobs_to_run"
    planned_server_launches = "planned_server_launches"
    failed_jobs = "failed_jobs"
    server_launches = "server_launches"
    crossover = "crossover"
    crossover_threshold = "crossover_threshold"
    # A capacity search's job: its runs' rates and SLO outcomes (capacity_points_tag).
    capacity_points = "specexp.capacity_points"
    # An open-loop job: each measured run's steady window and Little's-law verdict
    # (steady_state_tag).
    steady_state = "specexp.steady_state"
    # A capacity search's job: its runs as points of the rate curve (rate_curve_tag).
    rate_curve = "specexp.rate_curve"
    # A capacity search's job: the servers that died under it (server_deaths_tag).
    server_deaths = "specexp.server_deaths"
    # Where a job's energy per token came from (specexp.host.energy.EnergySource), or "not
    # measured".
    energy_source = "specexp.energy_source"
    # A job's configuration and where it ran, tagged when its run starts
    # (tracking/observer.py run_tags).
    engine = "engine"
    engine_version = "engine_version"
    stack = "stack"
    model = "model"
    attention_backend = "attention_backend"
    allreduce_backend = "allreduce_backend"
    speculative = "speculative"
    concurrency = "concurrency"
    workload = "workload"
    replicate = "replicate"
    git_commit = "git_commit"
    host = "host"
    platform = "platform"


def flag_tag(value: bool) -> str:
    """A yes-or-no tag (``server_reused``) as JSON writes a boolean, read by :func:`tag_flag`."""
    return json.dumps(value)


def tag_flag(text: Optional[str]) -> Optional[bool]:
    """A yes-or-no tag read back (None: the run has none)."""
    return None if text is None else bool(json.loads(text))


class Metric(StrEnum):
    tok_per_s = "tok_per_s"  # aggregate output tok/s of one measured run
    # The job's change against the sweep's baseline (percent) and its simultaneous interval,
    # logged by the sweep report; on the sweep's parent per level (step = the level).
    speedup_pct = "speedup_pct"
    speedup_ci_low_pct = "speedup_ci_low_pct"
    speedup_ci_high_pct = "speedup_ci_high_pct"
    launch_tok_per_s = "launch_tok_per_s"  # mean of one launch's measured runs
    server_ready_s = "server_ready_s"  # seconds from launch to ready, per launch
    wall_s = "wall_s"  # seconds one measured run took
    midpoint_unix = "midpoint_unix"  # when one measured run happened (Unix seconds)
    tok_per_s_mean = "tok_per_s_mean"
    launches = "launches"  # server launches the run's values came from
    measured_runs = "measured_runs"  # over all launches
    # Variance of tok/s within one launch and between launches (with several launches).
    var_within_launch = "tok_per_s_var_within_launch"
    var_between_launch = "tok_per_s_var_between_launch"
    # Per measured run: seconds the client waited for an idle server before it, and 1 when
    # the server was still busy when the wait ran out.
    idle_wait_s = "idle_wait_s"
    busy_start = "busy_start"
    # Per job: measured runs that started on a busy server, and those whose machine was
    # busy with other work meanwhile (the sweep report calls such a level unreliable).
    busy_start_runs = "busy_start_runs"
    busy_machine_runs = "busy_machine_runs"
    # Per measured run, what the client saw (means over its requests where per request)...
    request_tok_per_s = "request_tok_per_s"  # tok/s one request saw
    decode_tok_per_s = "decode_tok_per_s"  # the same without its TTFT
    requests = "requests"
    failed_requests = "failed_requests"
    output_tokens = "output_tokens"
    ttft_s = "ttft_s"
    tpot_s = "tpot_s"
    e2e_s = "e2e_s"
    acceptance_length = "acceptance_length"
    acceptance_rate = "acceptance_rate"
    itl_s = "itl_s"  # a series: its percentiles are logged (percentile_metric)
    chunk_gaps_s = "chunk_gaps_s"
    # ...and per job, over its measured runs.
    ttft_s_mean = "ttft_s_mean"
    tpot_s_mean = "tpot_s_mean"
    e2e_s_mean = "e2e_s_mean"
    request_tok_per_s_mean = "request_tok_per_s_mean"
    decode_tok_per_s_mean = "decode_tok_per_s_mean"
    acceptance_length_mean = "acceptance_length_mean"
    acceptance_rate_mean = "acceptance_rate_mean"
    # Per job, from the acceptance profile (analysis.acceptance): the mean acceptance length
    # per request, and the measured runs whose counts fail AL = 1 + sum of marginal rates.
    acceptance_length_per_request = "acceptance_length_per_request_mean"
    acceptance_identity_failures = "acceptance_identity_failures"
    # A synthetic-acceptance job: 1 when its realised acceptance is the pinned one.
    synthetic_acceptance_agrees = "synthetic_acceptance_agrees"
    output_tokens_total = "output_tokens_total"
    # Open loop, per measured run: the arrival rate asked for, the schedule's own rate, the
    # rate the client sent at (requests/s), and the latest a request was sent after it was due.
    rate_asked = "rate_asked_rps"
    rate_scheduled = "rate_scheduled_rps"
    rate_achieved = "rate_achieved_rps"
    send_lag_max_s = "send_lag_max_s"
    # Open loop, per measured run (specexp.core.steady): its steady window (seconds after
    # its start, by due time) and the requests due in it; in it, the time-average requests
    # in flight and Little's lambda W; 1 when they agree and the client kept its schedule.
    steady_start_s = "steady_start_s"
    steady_end_s = "steady_end_s"
    steady_requests = "steady_requests"
    in_flight = "in_flight"
    in_flight_predicted = "in_flight_little"
    steady = "steady"
    # Per measured run (specexp.host.energy.RunEnergy): joules the server's hardware drew,
    # per output token, 1 when the run was long enough for the meter, and how long that is;
    # per job, joules per token summarised with its interval (energy_j_per_token_mean,
    # _ci_low, ...; per launch launch_energy_j_per_token) and the runs shorter than the meter
    # resolves.
    energy_j = "energy_j"
    energy_j_per_token = "energy_j_per_token"
    energy_resolved = "energy_resolved"
    energy_shortest_window_s = "energy_shortest_window_s"
    energy_unresolved_runs = "energy_unresolved_runs"
    # Per job: measured runs flagged as not steady.
    not_steady_runs = "not_steady_runs"
    # A trace's replay (workload.trace), per job: what it sent, each field of
    # specexp.core.traces.TraceStats as trace_ + its name (TraceStats.as_dict).
    # Against the SLO (slo group), per measured run: the share of requests meeting it, and
    # those requests (and their tokens) per second; per job, each summarised with an
    # interval (``_mean``, ``_ci_low``, ``_ci_high``... as tok_per_s is).
    slo_attainment = "slo_attainment"
    goodput_rps = "goodput_rps"
    goodput_tok_per_s = "goodput_tok_per_s"
    # A capacity search's job: the highest rate meeting slo.target attainment (requests/s),
    # its interval, and the standard error of its log (arms are compared on it).
    capacity_rps = "capacity_rps"
    capacity_ci_low_rps = "capacity_ci_low_rps"
    capacity_ci_high_rps = "capacity_ci_high_rps"
    capacity_log_se = "capacity_log_se"
    capacity_target = "capacity_target"  # the attainment it was read at (slo.target)
    # ...and from the same runs (specexp.core.load_curve): the knee of mean latency against
    # the offered rate with its interval, the rate from which every run was over-saturated,
    # and the latency model L = C1 / (1 - rate C2): C1 (s), C2 (s), their intervals and
    # the p value of its lack of fit.
    knee_rps = "knee_rps"
    knee_ci_low_rps = "knee_ci_low_rps"
    knee_ci_high_rps = "knee_ci_high_rps"
    oversaturated_from_rps = "oversaturated_from_rps"
    model_c1_s = "model_c1_s"
    model_c1_ci_low_s = "model_c1_ci_low_s"
    model_c1_ci_high_s = "model_c1_ci_high_s"
    model_c2_s = "model_c2_s"
    model_c2_ci_low_s = "model_c2_ci_low_s"
    model_c2_ci_high_s = "model_c2_ci_high_s"
    model_lack_of_fit_p = "model_lack_of_fit_p"


# What a server's own accounting gives (Engine.server_accounting's names), and the client's
# metrics it stands beside: per run, and per job. Each is logged as server_ + that name.
SERVER_ACCOUNTING = {
    "output_tokens": (Metric.output_tokens, Metric.output_tokens_total),
    "ttft_s_mean": (Metric.ttft_s, Metric.ttft_s_mean),
    "tpot_s_mean": (Metric.tpot_s, Metric.tpot_s_mean),
    "e2e_s_mean": (Metric.e2e_s, Metric.e2e_s_mean),
    "step_s_mean": ("step_s", "step_s_mean"),  # the server's alone: no client figure
}


def server_metric(metric: str) -> str:
    """The server's own figure for a client metric."""
    return f"server_{metric}"


def position_metric(position: int) -> str:
    """The marginal acceptance rate at a draft position (from 0), per job."""
    return f"acceptance_marginal_p{position}"


def percentile_metric(series: Metric, percentile: str, per_run: bool = False) -> str:
    """A percentile (p50, p90, p99) of a series: per job ``itl_s_p50``; per run the
    inter-token latency's is named ``itl_p50_s``."""
    if per_run:
        return f"{series.removesuffix('_s')}_{percentile}_s"
    return f"{series}_{percentile}"


class Artifact(StrEnum):
    """Files of a job's output directory, logged to its run under the same names."""

    config = "config.yaml"  # the resolved config, secrets redacted
    command = "command.txt"  # the server command as launched, one shell line
    environment = "environment.json"  # variables specexp set, and those inherited (redacted)
    requests = "requests.jsonl"  # one line per request, written after each run
    # One line per launch measured whole (several launches): what a resumed sweep takes back.
    launches = "launches.jsonl"
    server_log = "server.log"
    stack = "stack.json"  # what the stack's interpreter holds
    effective = "effective.json"  # each requested setting as it ran, with the evidence
    prompts = "prompts.json"  # each prompt of a prompt set: its output, acceptance, tok/s
    # Acceptance per draft position, in NVIDIA specdec_bench's format (analysis.acceptance).
    speculation_profile = "speculation_profile.json"
    offline_journal = (
        "mlflow_offline.json"  # the run's tracking calls while the store was unreachable
    )
    # A sweep's report that the store could not take at the sweep's end (its directory).
    report_journal = "mlflow_offline_report.json"


class Unit(StrEnum):
    """What one independent value of an arm is."""

    launch = "launch"  # the mean of one server launch's measured runs
    run = "run"  # one measured run (a single launch)

    def counted(self, n: int) -> str:
        """``n`` of them, in words: "5 launches", "1 run"."""
        if n == 1:
            return f"1 {self}"
        return f"{n} {self}{'es' if self == Unit.launch else 's'}"


# Prefixes of per-setting tags: what was captured of the stack, what each requested setting
# ran as, and whether it engaged; and of the settings a sweep varied, one tag each.
STACK, EFFECTIVE, ENGAGED, FACTOR = "stack.", "effective.", "engaged.", "factor."
STACK_VERSION = "stack_version."  # the versions a stack declares, one tag each
CAPTURED = (STACK, EFFECTIVE)


def launch_metric(metric: str) -> str:
    """The per-launch series of a per-run metric."""
    return f"launch_{metric}"


class Engaged(StrEnum):
    """Every requested setting at once, worst first: the engaged tag is the status, then
    (NO, unknown) the settings it names."""

    yes = "yes"
    no = "NO"  # one or more did not engage
    unknown = "unknown"  # none failed to, and one or more could not be told


def engaged(effective: Mapping[str, Setting]) -> tuple[Engaged, list[str]]:
    """Whether every requested setting engaged, and the settings that make it not "yes"."""
    for status, overall in (
        (Engagement.not_engaged, Engaged.no),
        (Engagement.unknown, Engaged.unknown),
    ):
        names = [name for name, s in effective.items() if s.status == status]
        if names:
            return overall, names
    return Engaged.yes, []


def effective_tags(effective: Mapping[str, Setting]) -> dict[str, str]:
    """Each requested setting's engagement (and, when known, what actually ran)."""
    tags = {f"{ENGAGED}{name}": str(s.status) for name, s in effective.items()}
    tags.update({f"{EFFECTIVE}{name}": s.actual for name, s in effective.items() if s.actual})
    status, names = engaged(effective)
    if status == Engaged.no:
        tags[Tag.not_engaged] = ",".join(names)
    tags[Tag.engaged] = f"{status}: {', '.join(names)}" if names else str(status)
    return tags


def factors_tag(factors: Mapping[str, str]) -> str:
    return json.dumps(dict(factors), sort_keys=True)


def factor_tags(factors: Mapping[str, str]) -> dict[str, str]:
    """One tag per swept setting, so that each is a column of its own in the runs table."""
    return {f"{FACTOR}{key}": value for key, value in factors.items()}


@dataclass(frozen=True)
class JobRun(Record):
    """One finished or failed job as the store holds it."""

    HISTORY = History(
        "job run",
        (
            Version(
                1,
                "the run as read from the store; machine came later within format 1",
                ("machine",),
            ),
        ),
    )

    run_id: str
    name: str
    status: str
    kind: RunKind
    factors: Mapping[str, str]
    tags: Mapping[str, str]
    params: Mapping[str, str] = field(default_factory=dict)
    # The run's metrics (the last value of each).
    metrics: Mapping[str, float] = field(default_factory=dict)
    # Independent values of the metric read back, and what each one is.
    values: tuple[float, ...] = ()
    unit: Unit = Unit.run
    # When each value was measured (Unix seconds); empty if the run did not record it.
    times: tuple[float, ...] = ()
    # What the machine did while each value was measured (telemetry series by name, one
    # entry per value; specexp.core.stats.drift.MACHINE_SERIES), for run-level values.
    machine: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "factors", MappingProxyType(dict(self.factors)))
        object.__setattr__(self, "tags", MappingProxyType(dict(self.tags)))
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        object.__setattr__(self, "metrics", MappingProxyType(dict(self.metrics)))
        object.__setattr__(
            self,
            "machine",
            MappingProxyType(
                {k: tuple(v) for k, v in self.machine.items() if len(v) == len(self.values)}
            ),
        )
        if any(not isinstance(v, float) for v in self.values):
            raise TypeError(f"run {self.run_id}: values must be floats")
        if self.times and len(self.times) != len(self.values):
            raise ValueError(
                f"run {self.run_id}: {len(self.times)} times for {len(self.values)} values"
            )

    @classmethod
    def from_store(
        cls,
        run_id: str,
        name: Optional[str],
        status: str,
        tags: Mapping[str, str],
        params: Mapping[str, str],
        run_values: list[float],
        launch_values: list[float],
        metrics: Optional[Mapping[str, float]] = None,
        run_times: Sequence[float] = (),
        launch_times: Sequence[float] = (),
        run_machine: Optional[Mapping[str, Sequence[float]]] = None,
    ) -> JobRun:
        """From what MLflow returns: per-launch values when there were several launches (runs
        inside one launch share its launch-level variance), else the per-run values; their
        times when every value has one."""
        values, unit, times = (
            (launch_values, Unit.launch, launch_times)
            if len(launch_values) > 1
            else (run_values, Unit.run, run_times)
        )
        factors = json.loads(tags.get(Tag.factors, "{}"))
        kind = RunKind(tags.get(Tag.kind, RunKind.job))
        return cls(
            run_id,
            name or run_id[:8],
            status,
            kind,
            factors,
            tags,
            params,
            dict(metrics or {}),
            tuple(map(float, values)),
            unit,
            tuple(map(float, times)) if len(times) == len(values) else (),
            {k: tuple(map(float, v)) for k, v in (run_machine or {}).items()}
            if unit == Unit.run
            else {},
        )

    def engagement(self, setting: str) -> Optional[Engagement]:
        value = self.tags.get(f"{ENGAGED}{setting}")
        return Engagement(value) if value else None

    def captured(self) -> dict[str, str]:
        """What was captured of the stack and the effective settings."""
        return {k: v for k, v in self.tags.items() if k.startswith(CAPTURED)}


def capacity_points_tag(points: Sequence[RatePoint]) -> str:
    """A capacity search's points as its job's tag (``Tag.capacity_points``)."""
    return json.dumps([[p.rate, p.requests, p.good] for p in points])


def capacity_points(tags: Mapping[str, str]) -> tuple[RatePoint, ...]:
    """The points :func:`capacity_points_tag` wrote; none when the run has no such tag."""
    return tuple(
        RatePoint(float(rate), int(requests), int(good))
        for rate, requests, good in json.loads(tags.get(Tag.capacity_points, "[]"))
    )


def steady_state_tag(states: Mapping[int, SteadyState]) -> str:
    """Each measured run's steady state (``Tag.steady_state``), by run index."""
    return json.dumps({str(run): asdict(state) for run, state in states.items()})


def steady_states(tags: Mapping[str, str]) -> dict[int, SteadyState]:
    """What :func:`steady_state_tag` wrote; none when the run has no such tag."""
    return {
        int(run): SteadyState(**{**state, "verdict": SteadyVerdict(state["verdict"])})
        for run, state in json.loads(tags.get(Tag.steady_state, "{}")).items()
    }


@dataclass(frozen=True)
class ServerDeath:
    """A server that died under a capacity search: its one line, the run it died in (or its
    warm-up), the rate asked, the log the rest is in, and whether it was the rate's second
    death (which counted the rate as failed; a first one measured it again)."""

    what: str
    run: int
    warmup: bool
    rate: Optional[float]
    log: str
    again: bool

    def describe(self) -> str:
        during = "in the warm-up" if self.warmup else f"in run {self.run}"
        rate = f" at {self.rate:.3g} req/s" if self.rate is not None else ""
        then = (
            "the warm-up ran again on a new server"
            if self.warmup
            else "its second death at this rate: counted as a failed rate"
            if self.again
            else "measured once more on a new server"
        )
        return f"{during}{rate}: {self.what} ({then}; log: {self.log})"


def server_deaths_tag(deaths: Sequence[ServerDeath]) -> str:
    """A job's server deaths as its tag (``Tag.server_deaths``)."""
    return json.dumps([asdict(d) for d in deaths])


def server_deaths(tags: Mapping[str, str]) -> tuple[ServerDeath, ...]:
    """The deaths :func:`server_deaths_tag` wrote; none when the run has no such tag."""
    return tuple(ServerDeath(**d) for d in json.loads(tags.get(Tag.server_deaths, "[]")))


def rate_curve_tag(points: Sequence[CurvePoint]) -> str:
    """A capacity search's runs as rate-curve points (``Tag.rate_curve``)."""
    return json.dumps([asdict(p) for p in points])


def rate_curve(tags: Mapping[str, str]) -> tuple[CurvePoint, ...]:
    """The points :func:`rate_curve_tag` wrote; none when the run has no such tag."""
    return tuple(CurvePoint(**p) for p in json.loads(tags.get(Tag.rate_curve, "[]")))

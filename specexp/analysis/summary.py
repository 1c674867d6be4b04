"""A job's results as values, computed purely from its measured runs: the metrics of each run,
and the job's summary (tok/s with its interval, variance components, latency percentiles,
the server's own accounting beside the client's) with the notes that limit it. The runner
logs and prints these; nothing here does I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from specexp.analysis.prompts import JobPrompts, job_prompts
from specexp.analysis.results import (
    SERVER_ACCOUNTING,
    Metric,
    percentile_metric,
    server_metric,
)
from specexp.core.capacity import Capacity, estimate, rate_points, within_completed
from specexp.core.load_curve import (
    CurvePoint,
    Knee,
    LatencyModel,
    curve_point,
    fit_latency_model,
    knee,
)
from specexp.core.measurements import RunResult
from specexp.core.notes import Note, NoteKind
from specexp.core.schemas.slo import SloConfig
from specexp.core.slo import run_goodput
from specexp.core.stats.summaries import Summary, notes_for, summarize, variance_components
from specexp.core.stats.tails import PercentileEstimate, percentile_estimates
from specexp.core.steady import SteadyState, SteadyVerdict, steady_state


def slo_metrics(result: RunResult, slo: Optional[SloConfig]) -> dict[str, float]:
    """One run's open-loop rates and steady state, and its goodput against ``slo`` when that
    sets any level."""
    metrics = {
        Metric.rate_asked: result.asked_rate,
        Metric.rate_scheduled: result.scheduled_rate,
        Metric.rate_achieved: result.achieved_rate,
        Metric.send_lag_max_s: result.send_lag_s_max,
    }
    steady = steady_state(result)
    if steady and steady.verdict != SteadyVerdict.too_few:
        metrics.update(
            {
                Metric.steady_start_s: steady.start_s,
                Metric.steady_end_s: steady.end_s,
                Metric.steady_requests: steady.requests,
                Metric.in_flight: steady.in_flight,
                Metric.in_flight_predicted: steady.predicted_in_flight,
                Metric.steady: float(steady.ok),
            }
        )
    goodput = run_goodput(result, slo) if slo else None
    if goodput:
        metrics[Metric.slo_attainment] = goodput.attainment
        metrics[Metric.goodput_rps] = goodput.requests_per_s
        metrics[Metric.goodput_tok_per_s] = goodput.tok_per_s
    return {k: float(v) for k, v in metrics.items() if v is not None}


def run_metrics(
    result: RunResult, accounting: Mapping[str, float], slo: Optional[SloConfig] = None
) -> dict[str, float]:
    """Metrics of one measured run (logged with the run index as step): the client's, and
    beside them what the server's own ``accounting`` (Engine.server_accounting of the run's
    counter deltas) says of the same run; open-loop rates and goodput against ``slo``. A run
    with failed requests (a capacity search's rate that ended its server) logs only its
    counts, time, rates and goodput: its throughput and latencies were not measured."""
    if result.faults:
        failed: dict[str, Any] = {
            Metric.requests: len(result.records),
            Metric.failed_requests: len(result.faults),
            Metric.wall_s: result.wall_s,
            Metric.midpoint_unix: result.midpoint_unix,
            **slo_metrics(result, slo),
        }
        return {k: float(v) for k, v in failed.items() if v is not None}
    metrics: dict[str, Any] = {
        Metric.tok_per_s: result.tok_per_s,
        Metric.request_tok_per_s: result.request_tok_per_s,
        Metric.decode_tok_per_s: result.decode_tok_per_s,
        Metric.requests: len(result.records),
        Metric.output_tokens: result.output_tokens,
        Metric.wall_s: result.wall_s,
        Metric.midpoint_unix: result.midpoint_unix,
        Metric.ttft_s: result.ttft_s_mean,
        Metric.tpot_s: result.tpot_s_mean,
        Metric.e2e_s: result.e2e_s_mean,
        Metric.acceptance_length: result.acceptance_length,
        Metric.acceptance_rate: result.acceptance_rate,
        Metric.idle_wait_s: result.idle_wait_s,
        Metric.busy_start: float(result.busy_at_start is not None),
    }
    for name, value in accounting.items():
        metrics[server_metric(SERVER_ACCOUNTING[name][0])] = value
    metrics.update(result.telemetry)
    for found in percentile_estimates([r.itl_s for r in result.records if r.ok]):
        for suffix, value in _percentile_figures(found).items():
            metrics[percentile_metric(Metric.itl_s, found.name + suffix, per_run=True)] = value
    metrics.update(slo_metrics(result, slo))
    return {k: float(v) for k, v in metrics.items() if v is not None}


@dataclass(frozen=True)
class JobSummary:
    """What a job's measured runs add up to."""

    tok_per_s: Optional[Summary]
    # Per launch means with several launches, else per run: the values tok_per_s summarises.
    unit: str
    metrics: Mapping[str, float]
    notes: tuple[Note, ...] = field(default_factory=tuple)
    # Prompt by prompt, with a prompt set (workload.dataset).
    prompts: Optional[JobPrompts] = None
    # Against the SLO: attainment and goodput over the runs (or launches), each with its
    # interval; a capacity search's job has its capacity instead (its runs are at different
    # rates, so their goodput is not one quantity).
    attainment: Optional[Summary] = None
    goodput_rps: Optional[Summary] = None
    capacity: Optional[Capacity] = None
    # A capacity search's rate curve: its runs' points, knee and latency model.
    curve: tuple[CurvePoint, ...] = ()
    knee: Optional[Knee] = None
    latency_model: Optional[LatencyModel] = None
    # Open loop: each measured run's steady window and Little's-law verdict, by run index.
    steady: Mapping[int, SteadyState] = field(default_factory=dict)

    def metric(self, name: str) -> Optional[float]:
        return self.metrics.get(name)


def runs_by_launch(runs: Sequence[RunResult]) -> dict[int, list[float]]:
    groups: dict[int, list[float]] = {}
    for r in runs:
        groups.setdefault(r.launch, []).append(r.tok_per_s)
    return groups


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


# What a latency series is called in a note.
_SERIES_NAMES = {Metric.ttft_s: "TTFT", Metric.itl_s: "ITL", Metric.chunk_gaps_s: "chunk gaps"}


def _percentile_figures(found: PercentileEstimate) -> dict[str, float]:
    """A percentile's metrics by suffix: its value and interval, or none without enough
    values for the interval (a bare tail percentile of few requests is not reported)."""
    if found.value is None or found.ci_low is None or found.ci_high is None:
        return {}
    return {"": found.value, "_ci_low": found.ci_low, "_ci_high": found.ci_high}


def _too_few(series: str, first: PercentileEstimate, missing: list[PercentileEstimate]) -> str:
    """A series' percentiles without an interval, what they rest on and what they need."""
    rests_on = f"{first.n_eff:.0f} effective of {first.n}" + (
        f" from {first.requests} requests" if first.n != first.requests else ""
    )
    return (
        f"{series} {', '.join(e.name for e in missing)} ({rests_on}; "
        f"need{'s' if len(missing) == 1 else ''} {', '.join(str(e.needed) for e in missing)})"
    )


def _client_metrics(measured: Sequence[RunResult]) -> tuple[dict[str, float], list[Note]]:
    """Means and percentiles (with their intervals) of the client's per-run and per-request
    figures; one note for the latency series too short for some of their percentiles."""
    ok = [rec for r in measured for rec in r.records if rec.ok]
    metrics: dict[str, Optional[float]] = {
        Metric.ttft_s_mean: _mean([rec.ttft_s for rec in ok if rec.ttft_s]),
        Metric.request_tok_per_s_mean: _mean(
            [r.request_tok_per_s for r in measured if r.request_tok_per_s]
        ),
        Metric.decode_tok_per_s_mean: _mean(
            [r.decode_tok_per_s for r in measured if r.decode_tok_per_s]
        ),
    }
    for name, per_run in (
        (Metric.acceptance_length_mean, [r.acceptance_length for r in measured]),
        (Metric.acceptance_rate_mean, [r.acceptance_rate for r in measured]),
        (Metric.tpot_s_mean, [r.tpot_s_mean for r in measured]),
        (Metric.e2e_s_mean, [r.e2e_s_mean for r in measured]),
    ):
        metrics[name] = _mean([v for v in per_run if v is not None])
    # Each series as its requests' values, in order: values of one request move together.
    series_values: dict[Metric, list[Sequence[float]]] = {
        Metric.ttft_s: [[rec.ttft_s] for rec in ok if rec.ttft_s is not None and rec.ttft_s],
        Metric.itl_s: [rec.itl_s for rec in ok if rec.itl_s],
        Metric.chunk_gaps_s: [rec.chunk_gaps_s for rec in ok if rec.chunk_gaps_s],
    }
    short: list[str] = []
    requests_bound = False
    for series, observed in series_values.items():
        if not observed:
            continue
        found = percentile_estimates(observed)
        for tail in found:
            for suffix, value in _percentile_figures(tail).items():
                metrics[percentile_metric(series, tail.name + suffix)] = value
        metrics[percentile_metric(series, "n_eff")] = found[0].n_eff
        missing = [e for e in found if e.value is None]
        if missing:
            short.append(_too_few(_SERIES_NAMES[series], found[0], missing))
            requests_bound = requests_bound or found[0].requests_bound
    # One line for every series: what a run of few requests cannot have, not a doubt.
    notes: list[Note] = []
    if short:
        notes.append(
            Note(
                NoteKind.few_requests,
                "percentiles left out, too few values for a 95% interval: "
                + "; ".join(short)
                + (
                    " - the values of one request move together: more requests, not longer "
                    "ones, give more"
                    if requests_bound
                    else ""
                ),
            )
        )
    metrics[Metric.output_tokens_total] = float(sum(r.output_tokens for r in measured))
    return {k: v for k, v in metrics.items() if v is not None}, notes


def _machine_notes(
    measured: Sequence[RunResult], idle_timeout_s: float, cores: int
) -> tuple[dict[str, float], list[Note]]:
    """Runs that started on a busy server or ran on a busy machine: counts and notes."""
    busy_starts = [r for r in measured if r.busy_at_start is not None]
    busy_kind = NoteKind.busy_machine
    metrics: dict[str, float] = {
        Metric.busy_start_runs: float(len(busy_starts)),
        Metric.busy_machine_runs: float(
            sum(1 for r in measured if any(n.kind == busy_kind for n in r.machine_warnings))
        ),
    }
    notes = []
    if busy_starts:
        notes.append(
            Note(
                NoteKind.busy_server,
                f"measured run(s) {[r.run for r in busy_starts]} started on a busy server "
                f"(after {idle_timeout_s:.0f} s of waiting, stats.idle_timeout_s: "
                f"{busy_starts[0].busy_at_start}): another client uses it, or it is still "
                "working on earlier requests",
            )
        )
    for note in dict.fromkeys(n for r in measured for n in r.machine_warnings):
        hit = [r for r in measured if note in r.machine_warnings]
        busiest = max(r.telemetry.get("cpu_other_cores", 0.0) for r in hit)
        extent = f", up to {busiest:.2f} of {cores} cores" if note.kind == busy_kind else ""
        notes.append(
            Note(note.kind, f"{note.message} in measured run(s) {[r.run for r in hit]}{extent}")
        )
    return metrics, notes


def _server_metrics(
    measured: Sequence[RunResult], accounting: Mapping[str, float]
) -> tuple[dict[str, float], list[Note]]:
    """The server's own accounting over all measured runs, beside the client's figures; a
    token count that differs from the client's is a note."""
    metrics = {server_metric(SERVER_ACCOUNTING[k][1]): v for k, v in accounting.items()}
    # A run whose server died has no counters to read after it: set beside the rest only.
    client_tokens = sum(r.output_tokens for r in measured if r.accounting_deltas or not r.faults)
    notes = []
    if "output_tokens" in accounting and accounting["output_tokens"] != client_tokens:
        notes.append(
            Note(
                NoteKind.token_count,
                f"the server counted {accounting['output_tokens']:.0f} tokens generated during "
                f"the measured runs, the client received {client_tokens}: another client used "
                "this server, or tokens were lost on the way",
            )
        )
    return metrics, notes


def accounting_totals(measured: Sequence[RunResult]) -> dict[str, float]:
    """The engine's accounting counters' deltas summed over the measured runs."""
    totals: dict[str, float] = {}
    for run in measured:
        for name, delta in run.accounting_deltas.items():
            totals[name] = totals.get(name, 0.0) + delta
    return totals


def summarize_job(
    measured: Sequence[RunResult],
    *,
    confidence: float,
    cv_warn: float,
    idle_timeout_s: float,
    accounting: Mapping[str, float],
    cores: int,
    greedy: bool = True,
    slo: Optional[SloConfig] = None,
    capacity_search: bool = False,
) -> JobSummary:
    """The job's summary from its measured runs. With several launches, tok/s is summarised
    over the per-launch means (runs inside one launch share its launch-level variance).
    ``accounting`` is what the server's own counters say of all measured runs
    (Engine.server_accounting of :func:`accounting_totals`); ``cores``, the machine's."""
    by_launch = runs_by_launch(measured)
    unit_values = _per_unit(measured, [r.tok_per_s for r in measured])
    # A capacity search's runs are each at their own rate: their tok/s are points of a curve,
    # not repeats of one measurement, and no mean, spread or outlier test of them means
    # anything.
    searching = capacity_search and slo is not None and slo.defined
    tok = None if searching else summarize(unit_values, confidence)
    metrics: dict[str, float] = tok.as_dict(Metric.tok_per_s) if tok else {}
    metrics[Metric.launches] = float(len(by_launch))
    metrics[Metric.measured_runs] = float(len(measured))
    components = variance_components(list(by_launch.values()))
    if components:
        metrics[Metric.var_within_launch] = components.within_launch
        metrics[Metric.var_between_launch] = components.between_launch
    client, tail_notes = _client_metrics(measured)
    metrics.update(client)
    machine, machine_notes = _machine_notes(measured, idle_timeout_s, cores)
    server, server_notes = _server_metrics(measured, accounting)
    metrics.update(machine)
    metrics.update(server)
    notes = (
        ([] if searching else notes_for(unit_values, cv_warn))
        + tail_notes
        + machine_notes
        + server_notes
    )
    stalled = [(r.run, rec) for r in measured for rec in r.records if rec.stalled]
    if stalled:
        notes.append(
            Note(
                NoteKind.overloaded,
                f"{len(stalled)} open-loop request(s) stalled (no data for "
                "workload.stall_timeout_s: the server queued more than it served) in measured "
                f"run(s) {sorted({run for run, _ in stalled})}; each counts as missing the SLO",
            )
        )
    # Energy per output token over the runs (or launches), where every run was metered; a
    # capacity search's is per rate, on its rate curve (a mean over rates means nothing).
    per_token = [r.telemetry.get(Metric.energy_j_per_token) for r in measured]
    if measured and not searching and all(v is not None for v in per_token):
        energy = summarize(_per_unit(measured, [float(v or 0.0) for v in per_token]), confidence)
        metrics.update(energy.as_dict(Metric.energy_j_per_token) if energy else {})
        metrics[Metric.energy_unresolved_runs] = float(
            sum(not r.telemetry.get(Metric.energy_resolved) for r in measured)
        )
    steady, steady_notes = _steady_states(measured)
    notes.extend(steady_notes)
    if steady:
        metrics[Metric.not_steady_runs] = float(sum(s.flagged for s in steady.values()))
    unit = "launch means" if len(by_launch) > 1 else "measured runs"
    attainment = goodput = capacity = None
    curve: tuple[CurvePoint, ...] = ()
    found_knee = model = None
    if slo is not None and searching:
        curve = tuple(p for r in measured if (p := curve_point(r)) is not None)
        capacity = within_completed(
            estimate(rate_points(measured, slo), slo.target, confidence),
            max((p.completed_rps for p in curve), default=None),
        )
        metrics.update(_capacity_metrics(capacity))
        found_knee, model = knee(curve, confidence), fit_latency_model(curve, confidence)
        metrics.update(_curve_metrics(found_knee, model))
    elif slo is not None and slo.defined:
        outcomes = [run_goodput(r, slo) for r in measured]
        attainment = summarize(
            _per_unit(measured, [g.attainment if g else 0.0 for g in outcomes]), confidence
        )
        goodput = summarize(
            _per_unit(measured, [g.requests_per_s if g else 0.0 for g in outcomes]), confidence
        )
        metrics.update(attainment.as_dict(Metric.slo_attainment) if attainment else {})
        metrics.update(goodput.as_dict(Metric.goodput_rps) if goodput else {})
    return JobSummary(
        tok,
        unit,
        metrics,
        tuple(notes),
        job_prompts(measured, greedy),
        attainment,
        goodput,
        capacity,
        curve,
        found_knee,
        model,
        steady,
    )


def _curve_metrics(found: Knee, model: Optional[LatencyModel]) -> dict[str, float]:
    figures = {
        Metric.knee_rps: found.rate,
        Metric.knee_ci_low_rps: found.ci_low,
        Metric.knee_ci_high_rps: found.ci_high,
        Metric.oversaturated_from_rps: found.oversaturated_from,
    }
    if model is not None:
        figures.update(
            {
                Metric.model_c1_s: model.c1,
                Metric.model_c1_ci_low_s: model.c1_ci[0],
                Metric.model_c1_ci_high_s: model.c1_ci[1],
                Metric.model_c2_s: model.c2,
                Metric.model_c2_ci_low_s: model.c2_ci[0],
                Metric.model_c2_ci_high_s: model.c2_ci[1],
                Metric.model_lack_of_fit_p: model.lack_of_fit_p,
            }
        )
    return {k: float(v) for k, v in figures.items() if v is not None}


def _steady_states(measured: Sequence[RunResult]) -> tuple[dict[int, SteadyState], list[Note]]:
    """Each open-loop run's steady state, and a note per likely cause of the runs flagged."""
    states = {r.run: s for r in measured if (s := steady_state(r)) is not None}
    notes = []
    for verdict in (SteadyVerdict.client_saturated, SteadyVerdict.server_queueing):
        flagged = {run: s for run, s in states.items() if s.verdict == verdict}
        if flagged:
            worst = min(flagged.values(), key=lambda s: s.little_ratio)
            notes.append(
                Note(
                    NoteKind.not_steady,
                    f"measured run(s) {sorted(flagged)} not steady, {worst.describe()} "
                    "(the run furthest from it)",
                )
            )
    return states, notes


def _per_unit(measured: Sequence[RunResult], values: Sequence[float]) -> list[float]:
    """Per-run ``values`` as a job's independent values: per-launch means with several
    launches (runs inside one launch share its launch-level variance), else the runs' own."""
    groups: dict[int, list[float]] = {}
    for run, value in zip(measured, values, strict=True):
        groups.setdefault(run.launch, []).append(value)
    if len(groups) > 1:
        return [sum(v) / len(v) for v in groups.values()]
    return list(values)


def _capacity_metrics(capacity: Capacity) -> dict[str, float]:
    figures = {
        Metric.capacity_rps: capacity.rate,
        Metric.capacity_ci_low_rps: capacity.ci_low,
        Metric.capacity_ci_high_rps: capacity.ci_high,
        Metric.capacity_log_se: capacity.log_se,
        Metric.capacity_target: capacity.target,
    }
    return {k: float(v) for k, v in figures.items() if v is not None}

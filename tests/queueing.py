"""An open-loop queue with a known law: the ground truth for the steady-state check, the
knee and the latency model. Poisson arrivals (conditioned on the first and last, as the
client's schedule is) to ``servers`` first-come-first-served servers with exponential
service; each request's latency counts from its due time, as the client's does. One server
is M/M/1, whose mean latency is exactly C1 / (1 - rate C2) with C1 = C2 = the mean service."""

from __future__ import annotations

import numpy as np

from specexp.core.measurements import RequestRecord, RunResult


def latencies(
    rng: np.random.Generator, arrivals: int, rate: float, service_s: float, servers: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """(due times, latencies) of one open-loop run."""
    span = (arrivals - 1) / rate
    due = np.concatenate([[0.0], np.sort(rng.random(arrivals - 2)) * span, [span]])
    work = rng.exponential(service_s, arrivals)
    free = np.zeros(servers)
    done = np.empty(arrivals)
    for k in range(arrivals):
        server = int(np.argmin(free))
        free[server] = done[k] = max(due[k], free[server]) + work[k]
    return due, done - due


def run_result(
    rng: np.random.Generator,
    arrivals: int,
    rate: float,
    service_s: float,
    servers: int = 1,
    send_lag_s: float = 0.0,
    run: int = 0,
) -> RunResult:
    """One open-loop run of the queue as the client records it (each send ``send_lag_s``
    late; 8 output tokens a request)."""
    due, latency = latencies(rng, arrivals, rate, service_s, servers)
    records = [
        RequestRecord(
            run=run,
            stream=k,
            warmup=False,
            start_unix=float(t),
            ok=True,
            e2e_s=float(w),
            ttft_s=float(w) / 8,
            output_tokens=8,
            due_s=float(t),
            send_lag_s=send_lag_s,
        )
        for k, (t, w) in enumerate(zip(due, latency, strict=True))
    ]
    return RunResult(run, False, float((due + latency).max()), records, asked_rate=rate)


def mm1_mean_latencies(
    rng: np.random.Generator, runs: int, arrivals: int, rate: float, service_s: float
) -> np.ndarray:
    """Mean latency of each of ``runs`` open-loop runs of an M/M/1 queue (vectorised over
    the runs: Lindley's recursion, one arrival at a time)."""
    span = (arrivals - 1) / rate
    due = np.concatenate(
        [
            np.zeros((runs, 1)),
            np.sort(rng.random((runs, arrivals - 2)), axis=1) * span,
            np.full((runs, 1), span),
        ],
        axis=1,
    )
    work = rng.exponential(service_s, (runs, arrivals))
    done = np.empty((runs, arrivals))
    free = np.zeros(runs)
    for k in range(arrivals):
        free = np.maximum(due[:, k], free) + work[:, k]
        done[:, k] = free
    return (done - due).mean(axis=1)

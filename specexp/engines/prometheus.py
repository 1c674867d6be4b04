"""A server's Prometheus exposition read: samples by name, draft positions, the load gauges
and the server's own accounting of a run."""

from __future__ import annotations

import re
from typing import Mapping, Optional

from specexp.engines.records import ServerLoad

__all__ = [
    "ACCEPTED_AT_POSITION",
    "DRAFT_POSITIONS_READ",
    "accounting_figures",
    "gauged_load",
    "parse_prometheus",
    "position_counters",
    "position_series",
]


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


def gauged_load(gauges: Mapping[str, str], metrics: Mapping[str, float]) -> Optional[ServerLoad]:
    """The server's load from its /metrics samples of ``gauges`` ({"running": name,
    "waiting": name}); None when it exposes neither."""
    found = {k: metrics[v] for k, v in gauges.items() if v in metrics}
    if not found:
        return None
    return ServerLoad(found.get("running", 0.0), found.get("waiting", 0.0))


def accounting_figures(deltas: Mapping[str, float]) -> dict[str, float]:
    """What the server says of a run, from its accounting counters' deltas, in the client's
    terms: output_tokens, and the means of ttft_s, tpot_s and e2e_s per request (and step_s
    per engine step) where the server keeps them as histogram sum and count."""
    figures = {"output_tokens": deltas["output_tokens"]} if "output_tokens" in deltas else {}
    for name in ("ttft_s", "tpot_s", "e2e_s", "step_s"):
        count = deltas.get(f"{name}_count")
        if count:
            figures[f"{name}_mean"] = deltas[f"{name}_sum"] / count
    return figures

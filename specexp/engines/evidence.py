"""What engaged, read from what the server did: its draft counters, the prompt cache the
measured requests found, and the settings an engine reports nothing on."""

from __future__ import annotations

from typing import Sequence

from specexp.core.measurements import RunResult
from specexp.core.schemas.engine import ServerSettings
from specexp.core.schemas.speculative import SpeculativeMethod
from specexp.core.schemas.workload import CacheUse, PromptReuse
from specexp.engines.records import Engagement, Setting

__all__ = [
    "FRESH_CACHED_SHARE",
    "caches_setting",
    "fresh_cached_bound",
    "speculation_from_counters",
    "unreported",
]


def unreported(
    server: ServerSettings, engine: str, runs: Sequence[RunResult]
) -> dict[str, Setting]:
    """Every requested setting unknown (``engine`` reports nothing on it), but the caches,
    which the measured requests report themselves."""
    settings = {
        name: Setting(requested, "", Engagement.unknown, f"engine={engine} reports nothing on this")
        for name, requested in server.requested().items()
    }
    settings["caches"] = caches_setting(server, runs)
    return settings


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

"""Settings to deploy: from a sweep of draft lengths by concurrency, the draft length to run
at each batch size, in each engine's own terms (specexp.engines.schedule_settings: vLLM's
``num_speculative_tokens_per_batch_size``, SGLang's adaptive-speculation config,
TensorRT-LLM's ``draft_len_schedule``, llama.cpp's servers per load).

vLLM's own tuner picks, per batch size, the draft length with the best median, whatever
its spread: a noisy level can switch a deployment to a length that is no better. Here a
level speculates only where a draft length is shown faster than no speculation (its
simultaneous interval against the baseline above 1), and then with the length of the best
mean among those; draft lengths the intervals cannot tell from the chosen one are named, so
that a person can prefer the shorter (cheaper) one knowingly. Pure: read from the sweep's
comparisons. Where a level was measured on one launch per arm with no launch variance
known, nothing is shown faster there and no setting is handed out (the report says to
measure with stats.launches=3).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from specexp.analysis.arms import Arm
from specexp.analysis.crossover import level as level_of
from specexp.core.records import History, Record, Version
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.stats.comparison import Comparison
from specexp.core.stats.verdicts import Verdict
from specexp.engines import schedule_settings
from specexp.engines.records import BatchSchedule, ScheduleSetting

# The batch sizes a schedule is written over: the last level's choice holds up to here.
MAX_BATCH = 1024

NO_SCHEDULE = (
    "no draft-length setting: levels measured on one launch per arm, where no length can be "
    "shown faster across launches; re-run the sweep with stats.launches=3 for one"
)


@dataclass(frozen=True)
class LevelChoice:
    """One level's draft length (0: no speculation), its speedup over none with the
    interval, and the lengths whose intervals overlap the chosen one's (not told apart)."""

    level: int
    draft_tokens: int
    speedup: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    indistinguishable: tuple[int, ...]
    reason: str
    # One launch per arm and no launch variance known: no length could be shown faster
    # across launches, so "off" here is no finding.
    launches_only: bool = False


@dataclass(frozen=True)
class DraftSchedule(Record):
    """A draft length for each level of ``factor``."""

    HISTORY = History(
        "draft schedule",
        (
            Version(
                1,
                "each level's choice; launches_only and settings came later within format 1",
                ("settings",),
            ),
        ),
    )

    factor: str
    choices: tuple[LevelChoice, ...]
    # Each engine's own setting for it, when every choice is a finding (holds).
    settings: dict[str, ScheduleSetting] = field(default_factory=dict)

    @property
    def holds(self) -> bool:
        """Every level's choice is a finding: a setting may be handed out."""
        return not any(c.launches_only for c in self.choices)

    def batch_schedule(self, max_batch: int = MAX_BATCH) -> BatchSchedule:
        """Draft tokens by batch size 1..max_batch, a level's choice holding from it up to
        the next level (the lowest's from 1); neighbours that agree are merged."""
        ordered = sorted(self.choices, key=lambda c: c.level)
        ranges: list[tuple[int, int, int]] = []
        for k, choice in enumerate(ordered):
            first = 1 if k == 0 else choice.level
            last = ordered[k + 1].level - 1 if k + 1 < len(ordered) else max_batch
            if ranges and ranges[-1][2] == choice.draft_tokens:
                ranges[-1] = (ranges[-1][0], last, choice.draft_tokens)
            else:
                ranges.append((first, last, choice.draft_tokens))
        return BatchSchedule(tuple(ranges))


def draft_schedule(
    pairs: Sequence[tuple[Arm, Arm]],
    comparisons: Sequence[Comparison],
    speculative: Mapping[str, SpeculativeConfig],
    fingerprint: Mapping[str, str],
    factor: str,
) -> Optional[DraftSchedule]:
    """The schedule from the sweep's (baseline, candidate) pairs and their comparisons, when
    its candidates are speculative arms of more than one draft length across more than one
    level of ``factor``; ``speculative`` and ``fingerprint`` give each arm's settings
    (config fingerprint by run id)."""
    by_level: dict[int, list[tuple[int, Comparison]]] = {}
    method: Optional[SpeculativeConfig] = None  # the candidates' settings, for the engines
    for (_, arm), compared in zip(pairs, comparisons, strict=True):
        if factor not in arm.factors:
            continue
        settings = speculative.get(fingerprint.get(arm.run_id, ""))
        if settings is None or settings.method == "none" or settings.switch_off_at is not None:
            continue
        method = method or settings
        by_level.setdefault(level_of(arm, factor), []).append((settings.num_draft_tokens, compared))
    lengths = {k for candidates in by_level.values() for k, _ in candidates}
    if len(by_level) < 2 or len(lengths) < 2:
        return None
    found = DraftSchedule(
        factor, tuple(_choose(level, by_level[level]) for level in sorted(by_level))
    )
    if not found.holds or method is None:
        return found
    return dataclasses.replace(found, settings=schedule_settings(found.batch_schedule(), method))


def _choose(level: int, candidates: list[tuple[int, Comparison]]) -> LevelChoice:
    # Faster as the verdict says it, which holds across launches (and has no caveat).
    shown = [(k, c) for k, c in candidates if c.verdict == c.finding == Verdict.faster]
    if not shown and any(c.launches_only for _, c in candidates):
        return LevelChoice(
            level,
            0,
            None,
            None,
            None,
            (),
            "one launch per arm: no draft length can be shown faster across launches",
            launches_only=True,
        )
    if not shown:
        return LevelChoice(
            level,
            0,
            None,
            None,
            None,
            (),
            "no draft length shown faster than no speculation: off",
        )
    k, best = max(shown, key=lambda kc: kc[1].ratio)
    tied = tuple(
        sorted(
            other
            for other, c in candidates
            if other != k and c.testable and c.ci_high >= best.ci_low and c.ci_low <= best.ci_high
        )
    )
    return LevelChoice(
        level,
        k,
        best.ratio,
        best.ci_low,
        best.ci_high,
        tied,
        f"the best mean of the {len(shown)} length(s) shown faster than none",
    )

"""What speculation buys prompt by prompt: a job's outcome per prompt of its prompt set, and
two arms compared per category (acceptance, speedup with simultaneous intervals) and output
by output (greedy speculation must be lossless). Pure: values in, values out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from specexp.core.measurements import RunResult
from specexp.core.notes import Note, NoteKind
from specexp.core.records import History, Record, Version
from specexp.core.stats.comparison import Comparison, compare

# Divergences a comparison lists (the share covers them all).
_SHOWN_DIVERGENCES = 3
_SNIPPET = 40


@dataclass(frozen=True)
class PromptOutcome:
    """One prompt of a job's set over its measured runs."""

    prompt_id: str
    category: str
    # The output of its first measured run, and whether every measured run returned it.
    text: str
    stable: bool
    finish: Optional[str]
    output_tokens: int
    # The server's own counts for this request (summed over the measured runs).
    drafted: int
    accepted: int
    # Its tokens over its request time, one value per measured run.
    tok_per_s: tuple[float, ...]

    @property
    def acceptance(self) -> Optional[float]:
        return self.accepted / self.drafted if self.drafted else None


@dataclass(frozen=True)
class CategoryOutcome:
    """One category of a job's prompt set."""

    category: str
    prompts: int
    acceptance: Optional[float]
    # Requests that ended at EOS (complete, not cut at max_tokens), and outputs every
    # measured run agreed on.
    natural_ends: int
    stable: int
    output_tokens: int


@dataclass(frozen=True)
class JobPrompts(Record):
    """A job's prompt-set outcomes: the artifact ``prompts.json`` of its run."""

    HISTORY = History("prompt outcomes", (Version(1, "each prompt's outcome"),))

    greedy: bool
    outcomes: tuple[PromptOutcome, ...]

    def categories(self) -> list[CategoryOutcome]:
        found = []
        for category in sorted({o.category for o in self.outcomes}):
            group = [o for o in self.outcomes if o.category == category]
            drafted = sum(o.drafted for o in group)
            found.append(
                CategoryOutcome(
                    category=category,
                    prompts=len(group),
                    acceptance=sum(o.accepted for o in group) / drafted if drafted else None,
                    natural_ends=sum(o.finish == "eos" for o in group),
                    stable=sum(o.stable for o in group),
                    output_tokens=sum(o.output_tokens for o in group),
                )
            )
        return found


def job_prompts(measured: Sequence[RunResult], greedy: bool) -> Optional[JobPrompts]:
    """The outcomes of every prompt the measured runs sent; None without a prompt set."""
    by_prompt: dict[str, list[Any]] = {}
    for result in measured:
        for record in result.records:
            if record.prompt_id is not None and record.ok:
                by_prompt.setdefault(record.prompt_id, []).append(record)
    if not by_prompt:
        return None
    outcomes = []
    for prompt_id, records in by_prompt.items():
        first = records[0]
        outcomes.append(
            PromptOutcome(
                prompt_id=prompt_id,
                category=first.category or "uncategorized",
                text=first.output_text,
                stable=all(r.output_text == first.output_text for r in records),
                finish=first.finish,
                output_tokens=int(first.output_tokens or 0),
                drafted=sum(int(r.speculative.get("spec_draft_tokens", 0)) for r in records),
                accepted=sum(int(r.speculative.get("spec_accepted_tokens", 0)) for r in records),
                tok_per_s=tuple(r.tok_per_s for r in records if r.tok_per_s),
            )
        )
    return JobPrompts(greedy=greedy, outcomes=tuple(outcomes))


@dataclass(frozen=True)
class Divergence:
    prompt_id: str
    # Where the outputs first differ (a character offset), and each output from there.
    at: int
    baseline: str
    candidate: str


@dataclass
class CategoryRow:
    category: str
    prompts: int
    # The candidate's share of drafted tokens accepted (None: it drafted nothing).
    acceptance: Optional[float]
    # Identical outputs out of the prompts both arms answered.
    identical: int
    comparison: Comparison


@dataclass
class PromptComparison:
    """A candidate arm against its baseline on the same prompt set."""

    baseline: str
    candidate: str
    confidence: float
    rows: list[CategoryRow]
    compared: int
    identical: int
    divergences: list[Divergence] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    # Per-request acceptance of the candidate (the distribution a plot shows).
    acceptances: list[float] = field(default_factory=list)

    @property
    def identical_share(self) -> Optional[float]:
        return self.identical / self.compared if self.compared else None


def compare_prompts(
    baseline: JobPrompts,
    candidate: JobPrompts,
    *,
    names: tuple[str, str],
    confidence: float,
    threshold: float,
    power: float,
) -> PromptComparison:
    """Per category, the candidate's acceptance and speedup over the baseline, each category's
    interval simultaneous over all of them (Bonferroni); prompt by prompt, whether the outputs
    are identical, which greedy speculation promises."""
    base = {o.prompt_id: o for o in baseline.outcomes}
    cand = {o.prompt_id: o for o in candidate.outcomes}
    shared = [pid for pid in cand if pid in base]
    categories = sorted({cand[pid].category for pid in shared})
    # Simultaneous over the categories: each interval at 1 - alpha / m.
    each = 1 - (1 - confidence) / max(1, len(categories))
    rows = []
    for category in categories:
        ids = [pid for pid in shared if cand[pid].category == category]
        drafted = sum(cand[pid].drafted for pid in ids)
        accepted = sum(cand[pid].accepted for pid in ids)
        rows.append(
            CategoryRow(
                category=category,
                prompts=len(ids),
                acceptance=accepted / drafted if drafted else None,
                identical=sum(base[pid].text == cand[pid].text for pid in ids),
                comparison=compare(
                    _per_run_rates([base[pid] for pid in ids]),
                    _per_run_rates([cand[pid] for pid in ids]),
                    confidence=each,
                    threshold=threshold,
                    power=power,
                    baseline_name=names[0],
                    candidate_name=f"{names[1]} [{category}]",
                ),
            )
        )
    result = PromptComparison(
        baseline=names[0],
        candidate=names[1],
        confidence=confidence,
        rows=rows,
        compared=len(shared),
        identical=sum(base[pid].text == cand[pid].text for pid in shared),
        divergences=[
            _divergence(pid, base[pid].text, cand[pid].text)
            for pid in shared
            if base[pid].text != cand[pid].text
        ][:_SHOWN_DIVERGENCES],
        acceptances=[a for pid in shared if (a := cand[pid].acceptance) is not None],
    )
    result.notes = _equality_notes(result, baseline, candidate, [base[p] for p in shared])
    return result


def _per_run_rates(outcomes: Sequence[PromptOutcome]) -> list[float]:
    """The category's mean request tok/s in each measured run (runs aligned by position)."""
    runs = min((len(o.tok_per_s) for o in outcomes), default=0)
    return [sum(o.tok_per_s[r] for o in outcomes) / len(outcomes) for r in range(runs)]


def _divergence(prompt_id: str, a: str, b: str) -> Divergence:
    at = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return Divergence(prompt_id, at, a[at : at + _SNIPPET], b[at : at + _SNIPPET])


def _equality_notes(
    result: PromptComparison,
    baseline: JobPrompts,
    candidate: JobPrompts,
    base_outcomes: Sequence[PromptOutcome],
) -> list[Note]:
    if not (baseline.greedy and candidate.greedy):
        return [
            Note(
                NoteKind.outputs_differ,
                "outputs not compared: with sampling, speculation is lossless in distribution, "
                "not token for token",
            )
        ]
    differing = result.compared - result.identical
    if not differing:
        return []
    unstable = [o.prompt_id for o in (*base_outcomes, *candidate.outcomes) if not o.stable]
    cause = (
        f"the arms' own runs disagree on {len(unstable)} prompt(s) too: the server's "
        "numerics vary from run to run (batch-dependent: requests batched together, slot "
        "reuse), not only with speculation"
        if unstable
        else "each arm is self-consistent run to run: verifying a draft computes several "
        "positions in one batch, whose reductions round differently from one-token decoding, "
        "so a near-tie between two tokens can flip"
    )
    first = result.divergences[0]
    return [
        Note(
            NoteKind.outputs_differ,
            f"{differing} of {result.compared} greedy outputs of {result.candidate} differ from "
            f"{result.baseline}'s (first at character {first.at} of {first.prompt_id}); {cause}",
        )
    ]

"""TensorRT-LLM's batch schedule, ``draft_len_schedule``, read from its source: it does not
run here, so there is no engine plugin; what it takes is written down below with the file
and commit it was read at, and :func:`check` and :func:`draft_len_at` mirror its validator
and its runtime lookup (tests/unit/test_engine_schedules.py runs them on the cases of its
own tests).

What it takes (NVIDIA/TensorRT-LLM at :data:`COMMIT`):

- ``tensorrt_llm/llmapi/llm_args.py`` ``DecodingBaseConfig.draft_len_schedule``
  (``dict[int, int]``, a "developer interface") and ``validate_draft_len_schedule_and_sort``:
  keys >= 1, lengths >= 0, the smallest key's length equal to ``max_draft_len``, none longer;
  sorted by key. Mutually exclusive with ``max_concurrency``, which is translated to
  ``{max_concurrency: max_draft_len}``.
- ``tensorrt_llm/_torch/speculative/utils.py`` ``get_draft_len_for_batch_size``: a key is an
  inclusive upper bound - a batch takes the length of the first key not below it - and above
  the largest key the length is the floor, ``min_runtime_draft_len``: 1 for one-engine modes
  (the drafter's state would go stale at 0), 0 otherwise; every scheduled length is floored
  so too (its test ``test_min_runtime_draft_len.py``, in
  ``unittest/_torch/speculative/hw_agnostic/`` of its tests).

The meaning of a key changed: until PR #10860 (January 2026) a key was a lower bound (the
largest key not above the batch, PR #8194), and the last length held beyond the last key.
"""

from __future__ import annotations

import bisect
from typing import Mapping

from specexp.core.schemas.speculative import SpeculativeMethod
from specexp.engines.records import BatchSchedule, ScheduleSetting

COMMIT = "011d0933dcb5e592f5fa2626beaf42a96324c578"
SOURCE = (
    f"NVIDIA/TensorRT-LLM {COMMIT[:10]}: tensorrt_llm/llmapi/llm_args.py "
    "(DecodingBaseConfig), tensorrt_llm/_torch/speculative/utils.py "
    "(get_draft_len_for_batch_size)"
)

# specexp's methods as TensorRT-LLM's decoding configs, and the floor each runs with by
# default at COMMIT: EAGLE-3 one-model (eagle3_one_model defaults to true) and draft-target
# run in one engine (floor 1), n-grams in two (floor 0).
DECODING_TYPE = {
    SpeculativeMethod.eagle3: "Eagle3",
    SpeculativeMethod.draft: "DraftTarget",
    SpeculativeMethod.ngram: "NGram",
}
FLOOR = {SpeculativeMethod.eagle3: 1, SpeculativeMethod.draft: 1, SpeculativeMethod.ngram: 0}


def check(schedule: Mapping[int, int], max_draft_len: int) -> dict[int, int]:
    """``validate_draft_len_schedule_and_sort``: the schedule sorted by key, or ValueError
    with TensorRT-LLM's reason."""
    for batch_size, draft_len in schedule.items():
        if batch_size < 1:
            raise ValueError(
                f"draft_len_schedule: batch size threshold must be >= 1, got {batch_size}"
            )
        if draft_len < 0:
            raise ValueError(f"draft_len_schedule: draft length must be >= 0, got {draft_len}")
    smallest = min(schedule)
    if schedule[smallest] != max_draft_len:
        raise ValueError(
            f"draft_len_schedule[{smallest}] must equal max_draft_len because it is the "
            f"smallest batch-size key; got {schedule[smallest]}, max_draft_len={max_draft_len}"
        )
    longer = {b: d for b, d in schedule.items() if d > max_draft_len}
    if longer:
        raise ValueError(
            f"draft_len_schedule: all draft lengths must be <= max_draft_len ({max_draft_len}), "
            f"got {longer}"
        )
    return dict(sorted(schedule.items()))


def draft_len_at(schedule: Mapping[int, int], batch_size: int, floor: int = 0) -> int:
    """``get_draft_len_for_batch_size``: the length of the first key not below
    ``batch_size``, ``floor`` above the largest key, every length floored."""
    keys = sorted(schedule)
    found = bisect.bisect_left(keys, batch_size)
    return max(schedule[keys[found]], floor) if found < len(keys) else floor


def draft_len_schedule(schedule: BatchSchedule, method: SpeculativeMethod) -> ScheduleSetting:
    """``schedule`` as ``speculative_config``'s ``draft_len_schedule``: each range's last
    batch size a key, trailing ranges that do not draft left to the implicit floor; none
    where TensorRT-LLM cannot take it (a length longer than batch size 1's, no drafting at
    batch size 1, a method it lacks)."""
    if method not in DECODING_TYPE:
        return ScheduleSetting(
            f"no setting: TensorRT-LLM has no {method} speculation", source=SOURCE
        )
    longest, first = schedule.longest, schedule.ranges[0][2]
    if not first:
        return ScheduleSetting(
            "no setting: no drafting at batch size 1, which TensorRT-LLM's schedule cannot "
            "say (its smallest key's length is max_draft_len); serve without speculation"
            + ("" if not longest else " below the first drafting range"),
            source=SOURCE,
        )
    if longest > first:
        return ScheduleSetting(
            f"no setting: TensorRT-LLM takes no length longer than batch size 1's ({first}); "
            f"this schedule drafts {longest} at more load",
            source=SOURCE,
        )
    ranges = list(schedule.ranges)
    while ranges and not ranges[-1][2]:
        ranges.pop()
    keys = check({last: tokens for _, last, tokens in ranges}, first)
    floor = FLOOR[method]
    beyond = max(keys)
    return ScheduleSetting(
        f"LLM(speculative_config=...): batch sizes up to each key take its length, above "
        f"{beyond} the floor ({floor}"
        + (
            ": a one-engine mode keeps drafting 1 token and is never switched off)"
            if floor
            else ")"
        ),
        speculative_config={
            "decoding_type": DECODING_TYPE[method],
            "max_draft_len": first,
            "draft_len_schedule": keys,
        },
        source=SOURCE,
    )

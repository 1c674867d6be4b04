"""SGLang's requests and its stream: /generate streamed, each server-sent event (the whole
text so far, and at the end the request's meta_info) read into a :class:`StreamChunk`."""

from __future__ import annotations

from typing import Any

from specexp.core.schemas.workload import WorkloadConfig
from specexp.engines.records import Prompt, StreamChunk

# The per-request speculative counts by their 0.5.9 names (later releases renamed them: the
# second), in the client's words.
_SPECULATIVE_COUNTS = (
    ("spec_accept_token_num", "spec_num_correct_drafts", "spec_accepted_tokens"),
    ("spec_draft_token_num", "spec_num_proposed_drafts", "spec_draft_tokens"),
)


def completion_request(workload: WorkloadConfig, prompt: Prompt) -> tuple[str, dict[str, Any]]:
    return "/generate", {
        ("input_ids" if isinstance(prompt, list) else "text"): prompt,
        "sampling_params": {
            "max_new_tokens": workload.max_tokens,
            "ignore_eos": workload.ignore_eos,
            "temperature": workload.temperature,
        },
        "stream": True,
    }


def parse_event(event: dict[str, Any]) -> StreamChunk:
    meta = event.get("meta_info", {})
    done = meta.get("finish_reason") is not None
    # /generate streams the whole text so far in every event.
    chunk = StreamChunk(
        tokens_so_far=meta.get("completion_tokens"), done=done, text_so_far=event.get("text")
    )
    if done:
        reason = meta["finish_reason"]
        kind = reason.get("type") if isinstance(reason, dict) else reason
        chunk.final = {
            "finish": "eos" if kind == "stop" else kind,
            "completion_tokens": meta.get("completion_tokens"),
            "prompt_tokens": meta.get("prompt_tokens"),
            "cached_tokens": meta.get("cached_tokens"),
            **_speculative_figures(meta),
        }
    return chunk


def _speculative_figures(meta: dict[str, Any]) -> dict[str, Any]:
    """The request's speculative figures from its final meta_info, where the server sent them."""
    figures: dict[str, Any] = {}
    # 0.5.9 names, then the renamed ones of later releases.
    verify = meta.get("spec_verify_ct")
    if verify:
        figures["spec_verify_steps"] = verify
        figures["spec_accept_length"] = meta.get(
            "spec_accept_length", meta["completion_tokens"] / verify
        )
    # Steps that accepted exactly n drafts, n = 0, 1, ... (where the version sends it).
    histogram = meta.get("spec_correct_drafts_histogram", meta.get("spec_accept_histogram"))
    if histogram:
        figures["spec_accept_histogram"] = [int(n) for n in histogram]
    for old, new, ours in _SPECULATIVE_COUNTS:
        value = meta.get(new, meta.get(old))
        if value is not None:
            figures[ours] = value
    return figures

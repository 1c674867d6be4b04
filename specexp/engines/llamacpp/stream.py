"""llama.cpp's requests and its stream: /completion (or the chat endpoint) streamed, and
each server-sent event read into a :class:`StreamChunk`."""

from __future__ import annotations

from typing import Any

from specexp.core.schemas.workload import WorkloadConfig
from specexp.engines.records import Prompt, StreamChunk

# llama.cpp's stop_type / finish_reason, in the client's words.
_FINISH = {"eos": "eos", "limit": "length", "word": "stop word", "stop": "eos", "length": "length"}


def completion_request(workload: WorkloadConfig, prompt: Prompt) -> tuple[str, dict[str, Any]]:
    sampling = {
        "ignore_eos": workload.ignore_eos,
        "temperature": workload.temperature,
        "seed": workload.seed,
        "stream": True,
    }
    if workload.chat:
        # The OpenAI-compatible endpoint applies the model's chat template (--jinja).
        return "/v1/chat/completions", {
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": workload.max_tokens,
            "stream_options": {"include_usage": True},
            # Every chunk then carries the tokens so far (a chunk may hold several).
            "timings_per_token": True,
            **sampling,
        }
    return "/completion", {"prompt": prompt, "n_predict": workload.max_tokens, **sampling}


def tokenize_request(text: str) -> tuple[str, dict[str, Any]]:
    return "/tokenize", {"content": text, "add_special": False}


def parse_event(event: dict[str, Any]) -> StreamChunk:
    if event.get("object") == "chat.completion.chunk":
        return _chat_event(event)
    chunk = StreamChunk(
        tokens_so_far=event.get("tokens_predicted"),
        done=bool(event.get("stop")),
        text=event.get("content") or "",
    )
    if chunk.done:
        chunk.final = {
            "completion_tokens": event.get("tokens_predicted"),
            "prompt_tokens": event.get("tokens_evaluated"),
            "finish": _FINISH.get(event.get("stop_type", ""), event.get("stop_type")),
            **_timings(event.get("timings") or {}),
        }
    return chunk


def _chat_event(event: dict[str, Any]) -> StreamChunk:
    """A chunk of the chat endpoint: its delta's text and, with timings_per_token, the
    tokens so far; the finish reason comes in a chunk of its own, and the last chunk
    (usage, the request's timings) closes the stream."""
    choices = event.get("choices") or [{}]
    text = (choices[0].get("delta") or {}).get("content") or ""
    usage = event.get("usage")
    if usage:
        return StreamChunk(
            tokens_so_far=usage.get("completion_tokens"),
            done=True,
            text=text,
            final={
                "completion_tokens": usage.get("completion_tokens"),
                "prompt_tokens": usage.get("prompt_tokens"),
                **_timings(event.get("timings") or {}),
            },
        )
    so_far = (event.get("timings") or {}).get("predicted_n")
    chunk = StreamChunk(tokens_so_far=so_far, tokens_in_chunk=None if so_far else 0, text=text)
    reason = choices[0].get("finish_reason")
    if reason:
        chunk.final = {"finish": _FINISH.get(reason, reason)}
    return chunk


def _timings(timings: dict[str, Any]) -> dict[str, Any]:
    """The final event's per-request figures: prompt tokens served from cache, and the
    request's own draft counts."""
    figures: dict[str, Any] = {"cached_tokens": timings.get("cache_n")}
    if "draft_n" in timings:
        figures["spec_draft_tokens"] = timings["draft_n"]
        figures["spec_accepted_tokens"] = timings.get("draft_n_accepted", 0)
    return figures

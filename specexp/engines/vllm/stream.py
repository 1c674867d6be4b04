"""vLLM's requests and its stream: /v1/completions streamed with continuous usage, and each
server-sent event read into a :class:`StreamChunk`."""

from __future__ import annotations

from typing import Any

from specexp.core.schemas.engine import ServerSettings
from specexp.core.schemas.workload import WorkloadConfig
from specexp.engines.records import Prompt, StreamChunk


def completion_request(
    server: ServerSettings[Any], workload: WorkloadConfig, prompt: Prompt
) -> tuple[str, dict[str, Any]]:
    return "/v1/completions", {
        "model": str(server.model.path),
        "prompt": prompt,
        "max_tokens": workload.max_tokens,
        "ignore_eos": workload.ignore_eos,
        "temperature": workload.temperature,
        "seed": workload.seed,
        "stream": True,
        # Stream events are not tokens (a speculative step sends several at once): with
        # continuous usage every event carries the completion's token count so far.
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


def parse_event(event: dict[str, Any]) -> StreamChunk:
    usage = event.get("usage") or {}
    if usage and not event.get("choices"):  # the closing usage event: no new tokens
        return StreamChunk(
            done=True,
            final={
                "completion_tokens": usage.get("completion_tokens"),
                "prompt_tokens": usage.get("prompt_tokens"),
                # Only with --enable-prompt-tokens-details.
                "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
            },
        )
    choice = (event.get("choices") or [{}])[0]
    chunk = StreamChunk(tokens_so_far=usage.get("completion_tokens"), text=choice.get("text") or "")
    if choice.get("finish_reason"):
        # "stop" is EOS or a stop string; specexp sends no stop strings.
        reason = choice["finish_reason"]
        chunk.final = {"finish": "eos" if reason == "stop" else reason}
    return chunk

"""A fake streaming server speaking llama.cpp's /completion protocol: a test double for
the load client's limits and for faults. It never stands in for a measurement.

    python -m tests.fake_server --port P [--itl-ms 10] [--stall-after N] [--die-after N]
        [--slowdown-per-request F] [--at-once N] [--event JSON] [--no-headers]

``--slowdown-per-request`` injects a known drift: each request is paced ``1 + F * served``
times slower than the first, ``served`` counting the requests before it. ``--at-once N``
serves N requests at once and queues the rest in arrival order (0: no limit), so that a
request's wait - and the load a server of known service time takes - is known.
``--event JSON`` sends that payload as every event (a shape no engine sends, e.g. ``[1, 2, 3]``);
``--no-headers`` takes the request and never answers, not even its headers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from aiohttp import web


def make_app(
    itl_ms: float = 0.0,
    stall_after: int = -1,
    die_after: int = -1,
    tokens_per_event: int = 1,
    slowdown_per_request: float = 0.0,
    at_once: int = 0,
    event_payload: str = "",
    no_headers: bool = False,
    abort_above: int = 0,
    slots: int = 0,
) -> web.Application:
    served = 0
    in_flight = 0
    free = asyncio.Semaphore(at_once) if at_once else None

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def tokenize(request: web.Request) -> web.Response:
        """One token per character (their code points), as llama.cpp's /tokenize answers."""
        return web.json_response({"tokens": [ord(c) for c in (await request.json())["content"]]})

    async def completion(request: web.Request) -> web.StreamResponse:
        nonlocal in_flight
        pinned = (await request.json()).get("id_slot", -1)
        if slots and pinned >= slots:
            return web.Response(status=400, text=f"id_slot {pinned}: this server has {slots} slots")
        in_flight += 1
        if abort_above and in_flight > abort_above:
            # As llama.cpp ends on a failed assertion: its line on stderr, then SIGABRT.
            print(f"GGML_ASSERT(in_flight <= {abort_above}) failed", file=sys.stderr, flush=True)
            os.abort()
        try:
            if free is None:
                return await serve(request)
            async with free:
                return await serve(request)
        finally:
            in_flight -= 1

    async def serve(request: web.Request) -> web.StreamResponse:
        nonlocal served
        gap_ms = itl_ms * (1 + slowdown_per_request * served)
        served += 1
        body = await request.json()
        n_predict = int(body.get("n_predict", 16))
        prompt = body.get("prompt")
        if no_headers:
            await asyncio.sleep(3600)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if event_payload:
            for _ in range(n_predict):
                await response.write(f"data: {event_payload}\n\n".encode())
            await response.write_eof()
            return response
        produced = 0
        start = asyncio.get_running_loop().time()
        while produced < n_predict:
            if produced == stall_after:
                await asyncio.sleep(3600)  # connection open, nothing sent
            if produced == die_after:
                os._exit(1)  # the whole server dies mid-stream
            if gap_ms:
                # Paced against the start, so timer overshoot does not add up: the mean gap is exact.
                due = start + (produced + tokens_per_event) * gap_ms / 1000
                await asyncio.sleep(max(0.0, due - asyncio.get_running_loop().time()))
            step = min(tokens_per_event, n_predict - produced)
            produced += step
            event = {
                "content": "x" * step,
                "tokens": [1] * step,
                "tokens_predicted": produced,
                "stop": False,
            }
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        final = {
            "content": "",
            "stop": True,
            "tokens_predicted": produced,
            # A prompt of token ids is counted as sent; a text one as 8 tokens.
            "tokens_evaluated": len(prompt) if isinstance(prompt, list) else 8,
            "timings": {"predicted_n": produced},
        }
        await response.write(f"data: {json.dumps(final)}\n\n".encode())
        await response.write_eof()
        return response

    app = web.Application()
    app.add_routes(
        [
            web.get("/health", health),
            web.post("/completion", completion),
            web.post("/tokenize", tokenize),
        ]
    )
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    parser.add_argument("--tokens-per-event", type=int, default=1)
    parser.add_argument("--stall-after", type=int, default=-1)
    parser.add_argument("--die-after", type=int, default=-1)
    parser.add_argument("--slowdown-per-request", type=float, default=0.0)
    parser.add_argument("--at-once", type=int, default=0)
    parser.add_argument("--event", default="")
    parser.add_argument("--no-headers", action="store_true")
    parser.add_argument("--abort-above", type=int, default=0)
    # Not "--slots": llama-server's own flag of that name (no value) is in its command.
    parser.add_argument("--slot-count", type=int, default=0)
    # Started in llama-server's place, it is given llama-server's flags: only these matter.
    args = parser.parse_known_args()[0]
    web.run_app(
        make_app(
            args.itl_ms,
            args.stall_after,
            args.die_after,
            args.tokens_per_event,
            args.slowdown_per_request,
            args.at_once,
            args.event,
            args.no_headers,
            args.abort_above,
            args.slot_count,
        ),
        host=args.host,
        port=args.port,
        print=None,
    )


if __name__ == "__main__":
    main()

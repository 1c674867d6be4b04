"""specexp's open-loop requests as they were before 7abb4f4: llama.cpp's /completion with
arrival k pinned to slot k (mod the slots), Poisson arrivals at a rate, each sent when due.
One JSON line per request (ttft_s, e2e_s, tokens) and a summary line.
    python pinned_client.py URL RATE ARRIVALS OUT.jsonl [--slots 64] [--unpinned]"""

import argparse
import asyncio
import json
import random
import time

import aiohttp

from specexp.core.schemas.workload import PREFIX_WORDS

PROMPT = (
    "Write a detailed technical essay on how speculative decoding accelerates large language "
    "model inference, covering draft models, verification, acceptance rates and batching."
)


async def one(session, args, k, due, out):
    await asyncio.sleep(max(0.0, due - time.perf_counter()))
    prompt = " ".join(random.Random(f"pinned/{k}").choices(PREFIX_WORDS, k=12)) + ". " + PROMPT
    body = {
        "prompt": prompt,
        "n_predict": args.tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "seed": 0,
        "stream": True,
    }
    if not args.unpinned:
        body["id_slot"] = k % args.slots
    first = last = None
    tokens = 0
    async with session.post(args.url + "/completion", json=body) as response:
        async for line in response.content:
            if not line.startswith(b"data:"):
                continue
            event = json.loads(line[5:])
            now = time.perf_counter()
            tokens = event.get("tokens_predicted") or tokens
            if first is None:
                first = now
            last = now
    out.append(
        {
            "k": k,
            "ttft_s": first - due,
            "e2e_s": last - due,
            "tokens": tokens,
            "start": due,
            "end": last,
        }
    )


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("rate", type=float)
    parser.add_argument("arrivals", type=int)
    parser.add_argument("out")
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--unpinned", action="store_true")
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    rng = random.Random(0)
    span = (args.arrivals - 1) / args.rate
    offsets = [0.0, *sorted(rng.random() * span for _ in range(args.arrivals - 2)), span]
    out = []
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter() + 0.1
        await asyncio.gather(
            *(one(session, args, k, start + o, out) for k, o in enumerate(offsets))
        )
    wall = max(r["end"] for r in out) - start
    with open(args.out, "w") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")
    print(
        json.dumps(
            {
                "rate": args.rate,
                "pinned": not args.unpinned,
                "wall_s": wall,
                "tok_s": sum(r["tokens"] for r in out) / wall,
            }
        )
    )


asyncio.run(main())

"""The reference measured another way: llama-server alone, no specexp client.

    python benchmarks/direct_llamacpp.py [--threads 2] [--prompts 12] [--tokens 128]
        [--model gemma3-270m] [--spec none ngram-simple ngram-mod ...] [--self-draft K ...]

One server per method, HumanEval's first prompts one at a time, each a plain (not streamed)
/completion with the prompt cache off, greedy; the figures are the server's own: tokens it
predicted over the request's wall time (end to end, prefill included) and over its own
decode time (`timings.predicted_ms`), drafted and accepted tokens, and how many outputs
equal the first method's. specexp's client, statistics and config are not involved (only
its files: the packaged model, the prompt set, the self-draft writer), so a specexp figure
this disagrees with is the measurement's, not the configuration's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import urllib.request

from specexp.core.datasets import load_dataset
from specexp.core.trainedmodels import (
    ensure_packaged,
    ensure_self_draft,
    packaged_model,
    self_draft_path,
)
from specexp.engines.llamacpp.binary import llama_server_binary
from specexp.host.leases import free_port


def post(port: int, body: dict) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.load(response)


def measure(argv: list[str], port: int, prompts: list[str], tokens: int) -> dict:
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"server did not start: {argv}") from None
                time.sleep(0.2)
        figures = {"tokens": 0, "wall_s": 0.0, "decode_s": 0.0, "drafted": 0, "accepted": 0}
        outputs = []
        for text in prompts:
            body = {"prompt": text, "n_predict": tokens, "temperature": 0, "cache_prompt": False}
            start = time.perf_counter()
            answer = post(port, body)
            figures["wall_s"] += time.perf_counter() - start
            timings = answer["timings"]
            figures["tokens"] += answer["tokens_predicted"]
            figures["decode_s"] += timings["predicted_ms"] / 1000
            figures["drafted"] += timings.get("draft_n", 0)
            figures["accepted"] += timings.get("draft_n_accepted", 0)
            outputs.append(answer["content"])
        return {**figures, "outputs": outputs}
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--spec", nargs="*", default=["none", "ngram-simple", "ngram-mod"])
    parser.add_argument("--self-draft", nargs="*", type=int, default=[], metavar="K")
    args = parser.parse_args()
    target = ensure_packaged(args.model)
    prompts = [p.text for p in load_dataset("humaneval", limit=args.prompts)]
    methods: dict[str, list[str]] = {
        spec: [] if spec == "none" else ["--spec-type", spec] for spec in args.spec
    }
    for layers in args.self_draft:
        path = self_draft_path(target, layers, packaged_model(args.model).sha256)
        draft = ensure_self_draft(target, layers, path)
        methods[f"self-draft {layers} blocks"] = [
            "--model-draft",
            str(draft),
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            str(args.draft_tokens),
        ]
    first = None
    print(
        f"{args.model}, {args.prompts} HumanEval prompts, {args.tokens} tokens, {args.threads} threads"
    )
    for name, flags in methods.items():
        port = free_port("127.0.0.1")
        argv = [
            llama_server_binary(None),
            "--model", str(target), "--host", "127.0.0.1", "--port", str(port),
            "--threads", str(args.threads), "--device", "none", "--ctx-size", "4096",
            "--parallel", "1", "--cache-ram", "0", *flags,
        ]  # fmt: skip
        result = measure(argv, port, prompts, args.tokens)
        first = first or result["outputs"]
        same = sum(a == b for a, b in zip(first, result["outputs"], strict=True))
        accepted = (
            f"{result['accepted']}/{result['drafted']} accepted"
            if result["drafted"]
            else "no drafts"
        )
        print(
            f"{name:24s} e2e {result['tokens'] / result['wall_s']:6.1f} tok/s  decode "
            f"{result['tokens'] / result['decode_s']:6.1f} tok/s  {accepted}  outputs equal "
            f"to the first method's: {same}/{len(prompts)}",
            flush=True,
        )


if __name__ == "__main__":
    main()

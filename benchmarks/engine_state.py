"""Does a run measure its configuration, or what the run before it left in the engine?

    python benchmarks/engine_state.py [--model tiny-pair-small] [--rounds 6] [--small 4]
        [--large 16] [--tokens 128] [--threads 2] [--variant NAME ...]

On one llama.cpp server per variant, with fresh prompts, runs alternate as
large, small, small, large, small, small...: each small run follows either a large one or
another small one. A run that measures its configuration reads the same in both places; a
server that carries state (its prompt cache saving the slots the large run left, requests
routed to the slots still holding their prompts, batches of scattered slots) makes the
small run after a large one slower. Printed per variant: tok/s of small-after-large and
small-after-small (means, CV), their ratio, and the cached prompt tokens requests reported.

Variants (llama.cpp settings, as specexp composes them):
  before        the engine's defaults as specexp composed them until now: host prompt
                cache on, slots left to llama.cpp, prompts keyed without the job
  cache-off     --cache-ram 0, slots left to llama.cpp
  pinned        --cache-ram 0, stream i on slot i (specexp's default)
  unified       --cache-ram 0, --kv-unified, every slot erased before each run
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from specexp import hydra_app
from specexp.core.tinymodels import ensure_pair
from specexp.host.leases import free_port
from specexp.hydra_app import prepare
from specexp.serving.client import LoadClient
from specexp.serving.event_loop import run_async
from specexp.serving.server import ServerProcess

VARIANTS = {
    "before": ["workload.caches=kept", "engine.pin_slots=false"],
    "cache-off": ["engine.pin_slots=false"],
    "pinned": [],
    "unified": ["engine.kv_unified=true", "engine.pin_slots=false"],
}


def job_for(model: str, large: int, tokens: int, threads: int, streams: int, extra: list[str]):
    """The job of one run size, with the variant's and the command line's overrides."""
    overrides = [
        f"model={model}",
        "workload=short",
        f"workload.max_tokens={tokens}",
        "workload.prompts=fresh",
        f"engine.parallel_slots={large}",
        f"engine.threads={threads}",
        f"concurrency.streams={streams}",
        *extra,
    ]
    return prepare(compose(config_name="config", overrides=overrides))


def measure(variant: str, args: argparse.Namespace, log_dir: Path) -> dict[str, object]:
    extra = VARIANTS[variant] + args.overrides
    small = job_for(args.model, args.large, args.tokens, args.threads, args.small, extra)
    large = job_for(args.model, args.large, args.tokens, args.threads, args.large, extra)
    if small.config.model.generate is not None:
        ensure_pair(small.config.model.generate, small.engine.model_format)
    # Both jobs' commands are the same server's (streams only size slots, fixed here).
    port = free_port()
    launch = small.command.at(port)
    server = ServerProcess(
        launch, "127.0.0.1", port, small.engine.health_path, log_dir / f"{variant}.log"
    )
    keyed = variant != "before"  # before: prompts keyed without the job, as until now

    def client(job):
        return LoadClient(
            job.engine,
            server.base_url,
            job.server,
            job.config.workload,
            job.config.concurrency,
            prompt_namespace=job.prompt_namespace() if keyed else "",
        )

    clients = {"small": client(small), "large": client(large)}
    after: dict[str, list[float]] = {"large": [], "small": []}
    cached: list[float] = []
    server.start()
    try:
        server.wait_ready(120)

        async def go() -> None:
            async with clients["small"].session() as http:
                # A warm-up of each size, then rounds of large, small, small. The small run
                # after a large one has the large run's index, as the same run of two jobs
                # sharing a server has in an interleaved sweep; the other small run an
                # index of its own.
                await clients["large"].run(0, True, http)
                await clients["small"].run(0, True, http)
                for k in range(1, args.rounds + 1):
                    await clients["large"].run(k, False, http)
                    for previous, run in (("large", k), ("small", 1000 + k)):
                        result = await clients["small"].run(run, False, http)
                        after[previous].append(result.tok_per_s)
                        cached.extend(
                            (r.prompt_cached_tokens or 0) / (r.prompt_tokens or 1)
                            for r in result.records
                        )

        run_async(go())
    finally:
        server.stop()
    return {
        "variant": variant,
        "after_large": after["large"],
        "after_small": after["small"],
        "cached_share": statistics.mean(cached) if cached else float("nan"),
    }


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-pair-small")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--small", type=int, default=4)
    parser.add_argument("--large", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variant", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--log-dir", type=Path, default=Path("outputs/engine_state"))
    parser.add_argument(
        "--overrides", nargs="*", default=[], help="more overrides (stack=llamacpp-cuda ...)"
    )
    args = parser.parse_args()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    hydra_app.register()
    with initialize_config_dir(config_dir=hydra_app.CONFIG_DIR, version_base="1.3"):
        rows = [measure(v, args, args.log_dir) for v in args.variant]
    print(
        f"{args.small} streams after {args.large} vs after {args.small}, {args.tokens} tokens, "
        f"{args.rounds} rounds, model {args.model}, {args.threads} threads"
    )
    print(
        "| variant | after large tok/s (CV) | after small tok/s (CV) | ratio | cached prompt share |"
    )
    print("|---|---|---|---|---|")
    for row in rows:
        large, small = row["after_large"], row["after_small"]
        print(
            f"| {row['variant']} | {statistics.mean(large):.1f} ({cv(large):.1%}) | "
            f"{statistics.mean(small):.1f} ({cv(small):.1%}) | "
            f"{statistics.mean(large) / statistics.mean(small):.3f} | {row['cached_share']:.1%} |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()

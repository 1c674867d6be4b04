"""What llama-server's own log (--log-verbosity 4) says of a measurement: from its tasks'
"processing task" and "stop processing" lines, which slots were decoding at each moment and
into how many runs of consecutive slot ids they fell - the forward passes a decode step takes
without a unified KV cache (llama.cpp's split_equal accepts only consecutive sequence ids in a
ubatch) - and each task's own generation time per token ("eval time").
    python slot_runs.py SERVER.LOG [SLOTS_AT_LEAST]"""

import re
import statistics
import sys

STAMP = r"(\d+)\.(\d+)\.(\d+)\.(\d+)"
EVENT = re.compile(
    STAMP + r" I slot .*?: id +(\d+) \| task (\d+) \| (processing task|stop processing)"
)
EVAL = re.compile(r"id +(\d+) \| task (\d+) \|\s+eval time =\s+([\d.]+) ms /\s+(\d+) tokens")


def seconds(m: re.Match) -> float:
    minutes, secs, ms, us = (int(g) for g in m.groups()[:4])
    return minutes * 60 + secs + ms / 1e3 + us / 1e6


def runs_of(active: set[int]) -> int:
    ids = sorted(active)
    return sum(1 for i, s in enumerate(ids) if i == 0 or ids[i - 1] != s - 1)


def main(path: str, busy: int = 60) -> None:
    active: set[int] = set()
    last_t = None
    weighted = total = 0.0
    per_window: list[tuple[float, int]] = []
    per_token_ms = []
    for line in open(path, errors="replace"):
        m = EVENT.match(line)
        if m:
            t = seconds(m)
            if last_t is not None and len(active) >= busy:
                weighted += runs_of(active) * (t - last_t)
                total += t - last_t
                per_window.append((t, runs_of(active)))
            last_t = t
            slot = int(m.group(5))
            (active.add if m.group(7) == "processing task" else active.discard)(slot)
            continue
        e = EVAL.search(line)
        if e:
            per_token_ms.append(float(e.group(3)) / int(e.group(4)))
    print(
        f"{path}: {total:.1f} s with >= {busy} slots decoding, "
        f"{weighted / total if total else float('nan'):.2f} runs of consecutive slots on average; "
        f"tasks' eval ms/token median {statistics.median(per_token_ms):.2f} over {len(per_token_ms)} tasks"
    )


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))

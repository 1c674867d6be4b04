"""specexp's runs against bench_serving's at the same rate: the share of requests
within the SLO (TTFT <= ttft, mean ITL <= itl) by one rule, and bench_serving's tok/s.
    python peer_compare.py TTFT_S ITL_S TOKENS DIR"""

import glob
import json
import statistics
import sys

ttft_slo, itl_slo, tokens = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
for path in sorted(glob.glob(f"{sys.argv[4]}/specexp-*/requests.jsonl")):
    runs = {}
    for line in open(path):
        r = json.loads(line)
        runs.setdefault((r["warmup"], r["run"]), []).append(r)
    for (warm, run), recs in sorted(runs.items(), key=lambda kv: (not kv[0][0], kv[0][1])):
        met = sum(
            1
            for r in recs
            if r["ok"] and r["ttft_s"] <= ttft_slo and statistics.mean(r["itl_s"]) <= itl_slo
        )
        print(
            f"specexp {path.split('/')[-2]} {'warm-up' if warm else f'run {run}'}: met {met}/{len(recs)}"
        )
for path in sorted(glob.glob(f"{sys.argv[4]}/bench-*.jsonl")):
    d = json.loads(open(path).readlines()[-1])
    met = sum(
        1
        for t, itl in zip(d["ttfts"], d["itls"], strict=True)
        if t <= ttft_slo and sum(itl) / (tokens - 1) <= itl_slo
    )
    print(
        f"bench {path.split('/')[-1]}: {d['output_throughput']:.1f} tok/s, "
        f"met {met}/{d['completed']}, duration {d['duration']:.2f} s"
    )

"""Each job of the CPU surface: the client's figures against llama.cpp's own accounting.
    python reference.py sqlite:////tmp/cpusurf/mlflow.db      (the sweep's store)"""
import sys

from mlflow.tracking import MlflowClient

c = MlflowClient(sys.argv[1])
runs = c.search_runs(["1"], max_results=200)
rows = []
for r in runs:
    m, t = r.data.metrics, r.data.tags
    if "server_tpot_s_mean" not in m:
        continue
    name = t.get("mlflow.runName", "")
    rows.append((name, m.get("output_tokens_total"), m.get("server_output_tokens_total"), m.get("tpot_s_mean"), m.get("server_tpot_s_mean"), m.get("tok_per_s_mean"), m.get("busy_machine_runs"), m.get("cpu_other_cores")))
for row in sorted(rows):
    n, ct, st, cp, sp, tps, busy, other = row
    print(f"{n[:70]:70s} tokens {ct:.0f}/{st:.0f}  tpot client {cp*1000:.2f} ms server {sp*1000:.2f} ms ({(sp/cp-1)*100:+.1f}%)  tok/s {tps:.1f} busy {busy} other {other}")

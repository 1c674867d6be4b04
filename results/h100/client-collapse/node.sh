#!/usr/bin/env bash
# Issue 61 item 1 on one GPU: the same llama-server command (+sweep=capacity_gpu's none arm:
# tiny-pair-gpu, 64 slots, 256-token requests, fresh prompts) measured at the same open-loop
# rates by specexp as it is, by SGLang's bench_serving (0.4.9.post2, one file), by specexp's
# old pinned requests (pinned_client.py) and by specexp with engine.kv_unified=true. Each
# measurement on a server of its own: a warm-up run and two measured runs at one rate.
#   bash results/h100/client-collapse/node.sh start        the steps, detached (setsid)
#   bash results/h100/client-collapse/node.sh poll SECONDS  wait for them, copy $W into $OUT
# Carried in .collapse/ (git-ignored): wheels/ (what specexp runs with, the node lacking
# them, and llama.cpp's trimmed source), bench_serving.py, tok/ and prompts.json
# (peer_inputs.py).
set -uo pipefail
cd "$(dirname "$0")/../../.."
here=results/h100/client-collapse
W=/tmp/collapse
site=/tmp/specexp-site
mkdir -p "$W/done"
export PYTHONPATH="$PWD:$site" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
ARRIVALS=${ARRIVALS:-192}

case "${1:-}" in
  start)
    setsid nohup bash "$0" steps >>"$W/run.out" 2>&1 </dev/null &
    echo $! >"$W/run.pid"
    echo "started (pid $!)"
    exit 0
    ;;
  poll)
    pid=$(cat "$W/run.pid" 2>/dev/null || true)
    [ -n "$pid" ] || { echo "no steps on this machine (a new one): start again"; exit 4; }
    deadline=$((SECONDS + ${2:-480}))
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
    cat "$W/steps.txt" 2>/dev/null
    tail -n 5 "$W/run.out"
    tar czf "$OUT/collapse.tar.gz" --warning=no-file-changed --exclude='*.gguf' -C /tmp collapse || true
    kill -0 "$pid" 2>/dev/null && { echo "still running"; exit 3; }
    echo finished
    exit 0
    ;;
  steps) ;;
  *) echo "usage: node.sh start | poll SECONDS" >&2; exit 2 ;;
esac

step() {  # step NAME COMMAND...: once, timed
  [ -e "$W/done/$1" ] && return 0
  local name=$1 start=$SECONDS
  shift
  "$@" >"$W/$name.out" 2>&1
  echo "$name: rc $? in $((SECONDS - start)) s at $(date -u +%H:%M:%S)" | tee -a "$W/steps.txt"
  touch "$W/done/$name"
}

prepare() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >"$W/gpu.txt"
  python3 -m pip list --format=freeze >"$W/node-pip-list.txt" 2>/dev/null
  mkdir -p /tmp/wheels && cp .collapse/wheels/* /tmp/wheels/
  bash scripts/gpu-node.sh install /tmp/wheels --site "$site" >"$W/install.log" 2>&1 &
  local build=$!
  until [ -d "$site/specexp" ] || ! kill -0 "$build" 2>/dev/null; do sleep 2; done
  python3 - <<'PY'
from specexp.core.tinymodels import ensure_pair
from specexp.hydra_app import compose_config, prepare
job = prepare(compose_config(["model=tiny-pair-gpu", "stack=llamacpp-cuda", "engine.gpus=1"]))
print(ensure_pair(job.config.model.generate, job.engine.model_format))
PY
  wait "$build"
  tail -3 "$W/install.log"
}

# specexp as it is: one job, its own server, a warm-up and two measured runs at RATE.
specexp_job() {  # NAME RATE [OVERRIDE...]
  local name=$1 rate=$2
  shift 2
  python3 -m specexp stack=llamacpp-cuda model=tiny-pair-gpu engine.gpus=1 engine.parallel_slots=64 \
    engine.threads=4 speculative=none workload=short workload.max_tokens=256 workload.prompts=fresh \
    concurrency=poisson concurrency.streams=64 concurrency.arrivals="$ARRIVALS" concurrency.rate="$rate" \
    slo=interactive stats.warmup_runs=1 stats.measured_runs=2 stats.telemetry_interval_s=0.1 \
    tracking=off hydra.run.dir="$W/$name" "$@"
}

# The server specexp ran for RATE_SOURCE, started again on port 8099 (EXTRA flags added),
# its log in $W/NAME/server.log; /metrics after each run.
serve() {  # NAME SOURCE EXTRA...
  local name=$1 source=$2
  shift 2
  mkdir -p "$W/$name"
  local cmd
  cmd=$(sed 's/--port [0-9]*/--port 8099/' "$W/$source/command.txt")
  # command.txt begins with the server's environment (CUDA_VISIBLE_DEVICES=0 ...): env reads it.
  # shellcheck disable=SC2086
  env $cmd "$@" >"$W/$name/server.log" 2>&1 &
  echo $! >"$W/$name/server.pid"
  for _ in $(seq 120); do curl -sf localhost:8099/health >/dev/null && return 0; sleep 1; done
  return 1
}
unserve() { kill -9 "$(cat "$W/$1/server.pid")"; sleep 2; }
metrics() { curl -s localhost:8099/metrics >"$W/$1/metrics-$2.txt"; }

peer() {  # NAME SOURCE RATE EXTRA...: bench_serving, 3 runs (the first the warm-up)
  local name=$1 source=$2 rate=$3
  shift 3
  serve "$name" "$source" "$@" || return 1
  for run in 0 1 2; do
    python3 .collapse/bench_serving.py --backend sglang-oai --base-url http://127.0.0.1:8099 \
      --model .collapse/tok --tokenizer .collapse/tok --dataset-name random \
      --dataset-path .collapse/prompts.json --random-input-len 39 --random-output-len 256 \
      --random-range-ratio 1.0 --num-prompts "$ARRIVALS" --request-rate "$rate" --seed "$run" \
      --output-file "$W/$name/bench-$run.jsonl" --output-details --disable-tqdm
    metrics "$name" "$run"
  done
  unserve "$name"
}

pinned() {  # NAME SOURCE RATE [--unpinned]
  local name=$1 source=$2 rate=$3
  shift 3
  serve "$name" "$source" || return 1
  for run in 0 1 2; do
    python3 "$here/pinned_client.py" http://127.0.0.1:8099 "$rate" "$ARRIVALS" "$W/$name/requests-$run.jsonl" "$@"
    metrics "$name" "$run"
  done
  unserve "$name"
}

step prepare prepare
step specexp-20 specexp_job specexp-20 20
step peer-20 peer peer-20 specexp-20 20
step specexp-14 specexp_job specexp-14 14
step peer-14 peer peer-14 specexp-14 14
step pinned-20 pinned pinned-20 specexp-20 20
step specexp-unified-20 specexp_job specexp-unified-20 20 engine.kv_unified=true
step peer-unified-20 peer peer-unified-20 specexp-20 20 --kv-unified --slot-save-path /tmp
echo "all steps done" | tee -a "$W/steps.txt"

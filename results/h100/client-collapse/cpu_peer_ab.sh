#!/bin/bash
# specexp and SGLang's bench_serving alternated on the CPU at one rate (R, default 6): the same
# llama-server command (specexp's, from its command.txt), the peer's server on core 0 and
# client on core 1 as specexp leases them; two rounds. Needs .collapse/ (peer_inputs.py).
cd "$(dirname "$0")/../../.."
mkdir -p "${OUT_DIR:-/tmp/cmp}"
R=${R:-6}
for rep in 1 2; do
  timeout 400 nice -n 19 python -m specexp model=tiny-pair-small workload=short workload.max_tokens=32 workload.prompts=fresh concurrency=poisson concurrency.rate=$R concurrency.arrivals=48 concurrency.streams=8 engine.threads=1 slo=cpu_interactive stats.warmup_runs=1 stats.measured_runs=2 tracking=off hydra.run.dir=${OUT_DIR:-/tmp/cmp}/specexp-$rep > ${OUT_DIR:-/tmp/cmp}/specexp-$rep.out 2>&1
  cmd=$(sed 's/--port [0-9]*/--port 8099/' ${OUT_DIR:-/tmp/cmp}/specexp-$rep/command.txt)
  nice -n 19 taskset -c 0 env $cmd > ${OUT_DIR:-/tmp/cmp}/peer-$rep-server.log 2>&1 & spid=$!
  for i in $(seq 60); do curl -sf localhost:8099/health >/dev/null && break; sleep 1; done
  for run in 0 1 2; do
    HF_HUB_OFFLINE=1 nice -n 19 taskset -c 1 python .collapse/bench_serving.py --backend sglang-oai --base-url http://127.0.0.1:8099 --model .collapse/tok --tokenizer .collapse/tok --dataset-name random --dataset-path .collapse/prompts.json --random-input-len 39 --random-output-len 32 --random-range-ratio 1.0 --num-prompts 48 --request-rate $R --seed $run --output-file ${OUT_DIR:-/tmp/cmp}/bench-$rep-$run.jsonl --output-details --disable-tqdm > ${OUT_DIR:-/tmp/cmp}/bench-$rep-$run.out 2>&1
  done
  kill $spid; sleep 1
done
true

# Issue 61 item 7's own step for scripts/gpu-steps.sh (GPU_STEPS_FILE): SGLang's bench_serving
# beside +sweep=capacity_gpu - each arm's server started again from its job's command.txt and
# measured at the rates that bracket its capacity (peer_beside.py). Needs the peer's inputs,
# copied out of the carried .collapse/ to /tmp/collapse-in (bench_serving.py, tok/, prompts.json).
step_peer() {
  python3 results/capacity-peer/peer_beside.py "$store/capacity" "$store/peer" \
    --inputs /tmp/collapse-in >"$logs/peer.log" 2>&1 || true
  tail -n 20 "$logs/peer.log"
}

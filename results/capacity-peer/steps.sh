# Issue 61 item 7's own step for scripts/gpu-steps.sh (GPU_STEPS_FILE): SGLang's bench_serving
# beside +sweep=capacity_gpu - each arm's server started again from its job's command.txt and
# measured at the rates that bracket its capacity (peer_beside.py). Needs the peer's inputs,
# copied out of the carried .collapse/ to /tmp/collapse-in (bench_serving.py, tok/, prompts.json).
step_peer() {
  # The sweep's report is an artifact of its parent run, in the store.
  local parent
  parent=$(sed -n 's/^  parent_run_id: //p' "$store"/capacity/*/config.yaml | head -1)
  python3 results/capacity-peer/peer_beside.py "$store/capacity" "$store/peer" \
    --inputs /tmp/collapse-in \
    --report "mlruns/artifacts/$parent/artifacts/sweep_report/sweep_report.json" \
    >"$logs/peer.log" 2>&1 || true
  tail -n 20 "$logs/peer.log"
}

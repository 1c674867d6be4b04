"""dry_run=true prints the exact commands and launches nothing."""

from __future__ import annotations

import shlex

from tests.conftest import nothing_tracked, server_pids, specexp_in_process

# Given, not auto: a dry run then predicts no choice of llama.cpp's, which runs its
# llama-fit-params once a job (a second each); test_attention_prediction checks that line.
NOTHING_TO_PREDICT = "attention_backend=flash_attn"

REFERENCE_COMMAND = (
    "CUDA_HOME=/usr/local/cuda-13.0 LD_LIBRARY_PATH=/usr/local/cuda-13.0/lib64 NCCL_P2P_LEVEL=SYS "
    "/opt/specexp/cu130/bin/python -m sglang.launch_server --model-path nvidia/Kimi-K2.5-NVFP4 --tp-size 8 "
    "--host 127.0.0.1 --port 30000 --trust-remote-code --attention-backend flashinfer "
    "--enable-flashinfer-allreduce-fusion --enable-torch-symm-mem --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path AQ-MedAI/Kimi-K25-eagle3 --speculative-num-steps 3 "
    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --max-running-requests 64 "
    "--cuda-graph-bs 1 2 3 4 5 6 7 8 10 12 14 16 18 20 22 24 26 28 30 32 40 44 48 52 56 60 64 "
    "--enable-metrics"
)


def test_reference_story_command(tmp_path, tracking_env):
    result = specexp_in_process(
        "engine=sglang",
        "model=kimi-k2.5",
        "stack=cu130",
        "attention_backend=flashinfer",
        "allreduce_backend=flashinfer_fusion",
        "speculative=eagle3",
        "dry_run=true",
        cwd=tmp_path,
        env=tracking_env,
    )
    assert result.returncode == 0, result.stderr
    assert REFERENCE_COMMAND in result.stdout.splitlines()
    assert "sglang version: 0.5.9 (declared by stack cu130)" in result.stdout
    assert nothing_tracked(tmp_path)


def test_multirun_dry_run_prints_every_job_and_launches_nothing(tmp_path, tracking_env):
    before = server_pids()
    result = specexp_in_process(
        "-m",
        "speculative=none,draft,ngram",
        NOTHING_TO_PREDICT,
        "dry_run=true",
        cwd=tmp_path,
        env=tracking_env,
    )
    assert result.returncode == 0, result.stderr
    commands = [
        shlex.split(line)
        for line in result.stdout.splitlines()
        if "llama-server" in line and not line.startswith("#")
    ]
    assert len(commands) == 3
    for argv in commands:
        assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert (
        "--model-draft" in commands[1]
        and ["--spec-type", "ngram-simple"] == commands[2][commands[2].index("--spec-type") :][:2]
    )
    assert server_pids() - before == set()


def test_a_concurrency_ramp_is_a_sweep_of_its_levels_and_no_single_run(tmp_path, tracking_env):
    result = specexp_in_process(
        "-m", "concurrency=ramp", NOTHING_TO_PREDICT, "dry_run=true", cwd=tmp_path, env=tracking_env
    )
    assert result.returncode == 0, result.stderr
    assert "sweep: 7 jobs, 7 to run" in result.stdout
    for level in (1, 2, 4, 8, 16, 32, 64):
        assert f"  concurrency.streams={level}:" in result.stdout
    single = specexp_in_process("concurrency=ramp", "dry_run=true", cwd=tmp_path, env=tracking_env)
    assert single.returncode == 2
    assert "concurrency=ramp measures 7 levels" in single.stdout
    assert "run it as a sweep" in " ".join(single.stdout.split())
    assert nothing_tracked(tmp_path)

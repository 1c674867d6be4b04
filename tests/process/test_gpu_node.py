"""scripts/gpu-node.sh's argument handling, on a machine without CUDA (what CI can check of
the GPU node script; its build and runs are in results/h200, from a real H200)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-node.sh"


def gpu_node(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"PATH": path} if path is not None else {})}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_no_mode_or_an_unknown_one_prints_the_usage():
    for args in ((), ("build", "/tmp/w"), ("install",)):
        result = gpu_node(*args)
        assert result.returncode == 2 and "gpu-node.sh download WHEELS" in result.stderr, args


def test_an_unknown_option_is_named(tmp_path):
    result = gpu_node("install", str(tmp_path), "--cuda", "90")
    assert result.returncode == 2 and "unknown option --cuda" in result.stderr


def test_install_needs_the_wheel_directory_and_cuda(tmp_path):
    result = gpu_node("install", str(tmp_path / "missing"))
    assert result.returncode == 2 and "no wheel directory" in result.stderr
    # A machine without nvcc: nothing is installed or built.
    result = gpu_node("install", str(tmp_path), path="/usr/bin:/bin")
    assert result.returncode == 1 and "nvcc not found" in result.stderr

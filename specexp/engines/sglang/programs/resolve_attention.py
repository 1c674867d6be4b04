"""Run by the SGLang stack's interpreter, never imported by specexp: SGLang's own choice of
attention backend for each flag list on declared hardware, without a GPU. torch is told the
GPU's compute capability and the CUDA version before SGLang is imported, so SGLang's own
hardware predicates (is_hopper_with_cuda_12_3, is_sm100_supported, ...) answer for that
GPU; whether flashinfer is installed is the stack's to declare. 0.5.9 decides it in
ServerArgs._handle_attention_backend_compatibility, 0.5.23 in
arg_groups.model_override_base.get_default_attn_backend.

Arguments: the flag lists (JSON), the architecture, "mla" or "mha", the compute capability
("12.0"), the CUDA version ("13.0"), "flashinfer" or "no-flashinfer". Prints one object per
list: the backend chosen (or given), and the error SGLang raised after choosing, if any."""

import argparse
import dataclasses
import json
import logging
import sys
import types

import torch

flag_lists, architecture, attention, capability, cuda, flashinfer = sys.argv[1:7]
major, minor = (int(part) for part in capability.split("."))
torch.cuda.is_available = lambda: True
torch.cuda.get_device_capability = lambda *a, **k: (major, minor)
torch.cuda.device_count = lambda: 8
torch.cuda.get_device_name = lambda *a, **k: f"declared GPU, SM {capability}"
torch.version.cuda = cuda
torch.version.hip = None

from sglang.srt import server_args as server_args_module  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

logging.disable(logging.CRITICAL)
uses_mla = attention == "mla"
model = types.SimpleNamespace(
    hf_config=types.SimpleNamespace(architectures=[architecture]),
    has_asymmetric_kv=False,
    has_attention_sinks=False,
    get_num_kv_heads=lambda tp: 1,
)
try:
    from sglang.srt.arg_groups import model_override_base
    from sglang.srt.runtime_context import override_platform
except ImportError:  # 0.5.9
    model_override_base = override_platform = None


def chosen_by_0_5_23(args: argparse.Namespace) -> str:
    assert model_override_base is not None
    server_args = ServerArgs.from_cli_args(args)
    if server_args.attention_backend is not None:
        return server_args.attention_backend
    assert override_platform is not None
    with override_platform(has_flashinfer=flashinfer == "flashinfer"):
        return model_override_base.get_default_attn_backend(server_args, uses_mla, model)


def chosen_by_0_5_9(args: argparse.Namespace) -> str:
    view = object.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        setattr(view, f.name, getattr(args, f.name, default))
    view.get_model_config = lambda: model
    view.use_mla_backend = lambda: uses_mla
    server_args_module.is_flashinfer_available = lambda: flashinfer == "flashinfer"
    try:
        ServerArgs._handle_attention_backend_compatibility(view)
    except Exception as exc:  # checks after the choice: the choice stands, the error is told
        if view.attention_backend is None:
            raise
        view.attention_error = f"{type(exc).__name__}: {exc}"
    return view.attention_backend


resolved = []
for flags in json.loads(flag_lists):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(flags)
    args.device = args.device or "cuda"
    given = args.attention_backend
    backend = chosen_by_0_5_23(args) if model_override_base else chosen_by_0_5_9(args)
    resolved.append({"attention_backend": backend, "chosen": given is None})
print(json.dumps(resolved))

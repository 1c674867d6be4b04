"""vLLM's own choice of attention backend for a model, run in the stack's interpreter without
serving: the model's attention read from its config.json as vLLM's model config reads it,
then the platform's selector (vllm.v1.attention.selector.get_attn_backend) under a default
engine config. Prints {"attention_backend": NAME} as its last line.

argv: MODEL_DIR DTYPE ("auto" or a torch dtype name)"""

import json
import sys
from pathlib import Path

import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.v1.attention.selector import get_attn_backend

model_dir, dtype_name = sys.argv[1], sys.argv[2]
config = json.loads(Path(model_dir, "config.json").read_text())
config = config.get("text_config", config)
heads = config["num_attention_heads"]
head_size = config.get("head_dim") or config["hidden_size"] // heads
if dtype_name == "auto":
    # vLLM serves "auto" in the checkpoint's dtype, float32 checkpoints in bfloat16 on CPU.
    dtype_name = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    dtype_name = "bfloat16" if dtype_name == "float32" else dtype_name
with set_current_vllm_config(VllmConfig()):
    backend = get_attn_backend(
        head_size,
        getattr(torch, dtype_name),
        None,
        use_mla="kv_lora_rank" in config,
        num_heads=heads,
        has_sliding_window=bool(config.get("sliding_window")),
    )
print(json.dumps({"attention_backend": backend.get_name()}))

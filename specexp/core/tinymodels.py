"""Seeded llama-architecture GGUF models for running real speculative decoding on a CPU.

No model hub is reachable from the machines specexp is developed and tested on, so a
target/draft pair is generated locally. The *padded pair* technique makes speculation pay
off for real: the draft is a one-layer model; the target is that same layer followed by
extra layers whose attention-output and MLP-down projections are zero. Those layers cost
compute but leave the residual stream untouched, so target and draft agree on every token.
``divergence`` puts small random values into those projections instead, which makes the
target disagree with the draft now and then: a knob for the acceptance rate.

    python -m specexp.core.tinymodels --out /tmp/pair --target-layers 8 --divergence 0.0
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import shutil
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Optional

import gguf
import numpy as np
import safetensors.numpy
import tokenizers

from specexp.core.trainedmodels import models_cache

# Bumped whenever the file layout written below changes, so cached files are regenerated.
_FORMAT_VERSION = 1
_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
_MAX_VOCAB = 256 + len(_LETTERS) * (1 + 2 * len(_LETTERS)) + 2


@dataclass
class TinyPairSpec:
    """Shape and seed of a generated target/draft pair (the cache key); also the schema of
    ``model.generate`` in the config (mutable, so that Hydra can merge overrides into it)."""

    vocab_size: int = 1024
    embedding_length: int = 1024
    feed_forward_length: int = 2816
    head_count: int = 16
    draft_layers: int = 1
    target_layers: int = 8
    context_length: int = 4096
    divergence: float = 0.0
    seed: int = 0

    def fingerprint(self) -> str:
        payload = json.dumps(
            {"format": _FORMAT_VERSION, **dataclasses.asdict(self)}, sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def validate(self) -> None:
        if self.draft_layers < 1 or self.target_layers < self.draft_layers:
            raise ValueError(
                f"tiny pair needs 1 <= draft_layers <= target_layers, got {self.draft_layers} and {self.target_layers}"
            )
        if self.embedding_length % self.head_count:
            raise ValueError(
                f"embedding_length ({self.embedding_length}) must be a multiple of head_count ({self.head_count})"
            )
        if not 300 <= self.vocab_size <= _MAX_VOCAB:
            raise ValueError(
                f"vocab_size must be in [300, {_MAX_VOCAB}] (byte tokens + generated merges), got {self.vocab_size}"
            )
        if self.divergence < 0:
            raise ValueError(f"divergence must be >= 0, got {self.divergence}")


class ModelFormat(StrEnum):
    """How an engine loads weights: llama.cpp's single GGUF file, or a Hugging Face model
    directory (config.json, safetensors, tokenizer.json) as vLLM and SGLang load."""

    gguf = "gguf"
    hf = "hf"


@dataclass(frozen=True)
class TinyPairPaths:
    target: Path
    draft: Path
    # An EAGLE-3 head for the target (Hugging Face format only): seeded, untrained weights.
    eagle3: Optional[Path] = None

    def exist(self) -> bool:
        paths = (self.target, self.draft, *([self.eagle3] if self.eagle3 else []))
        return all((p / "config.json" if p.suffix != ".gguf" else p).is_file() for p in paths)


def pair_paths(
    spec: TinyPairSpec, model_format: ModelFormat = ModelFormat.gguf, cache_dir: Path | None = None
) -> TinyPairPaths:
    """Where the pair for ``spec`` lives in ``model_format`` (the same weights in either);
    deterministic, so a dry run can print it."""
    directory = Path(cache_dir or models_cache()) / f"tiny-pair-{spec.fingerprint()}"
    if model_format == ModelFormat.hf:
        return TinyPairPaths(
            target=directory / "target-hf",
            draft=directory / "draft-hf",
            eagle3=directory / "eagle3-hf",
        )
    return TinyPairPaths(target=directory / "target.gguf", draft=directory / "draft.gguf")


def ensure_pair(
    spec: TinyPairSpec, model_format: ModelFormat = ModelFormat.gguf, cache_dir: Path | None = None
) -> TinyPairPaths:
    """Generate the pair in ``model_format`` unless an identical one is cached already."""
    spec.validate()
    paths = pair_paths(spec, model_format, cache_dir)
    if paths.exist():
        return paths
    paths.target.parent.mkdir(parents=True, exist_ok=True)
    layers = _generate_layers(spec)
    embeddings = _generate_embeddings(spec)
    write = _write_hf if model_format == ModelFormat.hf else _write_gguf
    # Write to temporary names first: an interrupted generation must not leave a file
    # that a later run would take for a finished model.
    for path, n_layers in ((paths.draft, spec.draft_layers), (paths.target, spec.target_layers)):
        partial = path.with_name(path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        write(partial, spec, embeddings, layers[:n_layers], name=path.stem)
        _move_into_place(partial, path)
    if paths.eagle3:
        partial = paths.eagle3.with_name(paths.eagle3.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        _write_eagle3_head(partial, spec, paths.target)
        _move_into_place(partial, paths.eagle3)
    (paths.target.parent / "spec.json").write_text(json.dumps(dataclasses.asdict(spec), indent=2))
    return paths


def _move_into_place(partial: Path, path: Path) -> None:
    """Replace ``path`` (a file, or a directory left by an older layout) with ``partial``."""
    if path.is_dir():
        shutil.rmtree(path)
    partial.replace(path)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map, which llama.cpp's BPE expects."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def _vocabulary(vocab_size: int) -> tuple[list[str], list[str]]:
    """Byte tokens plus merges of letter pairs (and space+letter) up to ``vocab_size - 2``."""
    byte_tokens = list(_bytes_to_unicode().values())
    space = _bytes_to_unicode()[ord(" ")]
    pairs = [(space, a) for a in _LETTERS] + [(a, b) for a in _LETTERS for b in _LETTERS]
    pairs += [(space + a, b) for a in _LETTERS for b in _LETTERS]
    n_merges = vocab_size - len(byte_tokens) - 2
    merges = [f"{a} {b}" for a, b in pairs[:n_merges]]
    tokens = byte_tokens + [a + b for a, b in pairs[:n_merges]] + ["<s>", "</s>"]
    return tokens, merges


def _generate_embeddings(spec: TinyPairSpec) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([spec.seed, 0])
    n_embd = spec.embedding_length
    return {
        "token_embd.weight": rng.normal(0, 1.0, (spec.vocab_size, n_embd)).astype(np.float16),
        "output_norm.weight": np.ones(n_embd, dtype=np.float32),
        "output.weight": rng.normal(0, n_embd**-0.5, (spec.vocab_size, n_embd)).astype(np.float16),
    }


def _generate_layers(spec: TinyPairSpec) -> list[dict[str, np.ndarray]]:
    n_embd, n_ff = spec.embedding_length, spec.feed_forward_length
    layers = []
    for index in range(spec.target_layers):
        rng = np.random.default_rng([spec.seed, 1, index])

        def dense(rows: int, cols: int, scale: float, rng: np.random.Generator = rng) -> np.ndarray:
            return rng.normal(0, scale, (rows, cols)).astype(np.float16)

        padded = index >= spec.draft_layers
        # A padded layer's output projections decide whether it changes the result.
        out_scale = spec.divergence * n_embd**-0.5 if padded else n_embd**-0.5
        layers.append(
            {
                "attn_norm.weight": np.ones(n_embd, dtype=np.float32),
                "attn_q.weight": dense(n_embd, n_embd, n_embd**-0.5),
                "attn_k.weight": dense(n_embd, n_embd, n_embd**-0.5),
                "attn_v.weight": dense(n_embd, n_embd, n_embd**-0.5),
                "attn_output.weight": dense(n_embd, n_embd, out_scale),
                "ffn_norm.weight": np.ones(n_embd, dtype=np.float32),
                "ffn_gate.weight": dense(n_ff, n_embd, n_embd**-0.5),
                "ffn_up.weight": dense(n_ff, n_embd, n_embd**-0.5),
                "ffn_down.weight": dense(n_embd, n_ff, out_scale * (n_embd / n_ff) ** 0.5),
            }
        )
    return layers


# GGUF tensor names -> Hugging Face Llama names (per layer after "blk.N." / "model.layers.N.").
_HF_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_HF_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def _write_hf(
    directory: Path,
    spec: TinyPairSpec,
    embeddings: dict[str, np.ndarray],
    layers: list[dict[str, np.ndarray]],
    name: str,
) -> None:
    """The same model as a Hugging Face Llama directory with a byte-level BPE tokenizer of the
    same vocabulary. (Its rotary layout differs from the GGUF's, so the two formats do not
    produce the same text; each format's target and draft agree with each other.)"""
    directory.mkdir(parents=True)
    tensors = {_HF_NAMES[k]: v.astype(np.float16) for k, v in embeddings.items()}
    for index, layer in enumerate(layers):
        for tensor_name, array in layer.items():
            tensors[f"model.layers.{index}.{_HF_LAYER_NAMES[tensor_name]}"] = array.astype(
                np.float16
            )
    safetensors.numpy.save_file(tensors, str(directory / "model.safetensors"))
    tokens, merges = _vocabulary(spec.vocab_size)
    bos, eos = len(tokens) - 2, len(tokens) - 1
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.embedding_length,
        "intermediate_size": spec.feed_forward_length,
        "num_attention_heads": spec.head_count,
        "num_key_value_heads": spec.head_count,
        "num_hidden_layers": len(layers),
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.context_length,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float16",
        "name_or_path": f"specexp-tiny-{name}",
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer = tokenizers.Tokenizer(
        tokenizers.models.BPE(
            vocab={token: index for index, token in enumerate(tokens)},
            merges=[(a, b) for a, b in (merge.split(" ") for merge in merges)],
        )
    )
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    tokenizer.add_special_tokens(["<s>", "</s>"])
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "add_bos_token": False,
                "model_max_length": spec.context_length,
            },
            indent=2,
        )
    )


def _write_eagle3_head(directory: Path, spec: TinyPairSpec, target: Path) -> None:
    """An EAGLE-3 draft head for ``target`` in the layout of published EAGLE-3 checkpoints:
    one decoder layer over [token embedding; fused low/mid/high target hidden states], its
    own norm and LM head. Its weights are seeded and untrained, so EAGLE-3 runs for real
    (drafts proposed and verified) and its drafts are rarely accepted; the padded pair's
    draft model is the one that is always right."""
    directory.mkdir(parents=True)
    rng = np.random.default_rng([spec.seed, 3])
    n_embd, n_ff = spec.embedding_length, spec.feed_forward_length

    def dense(rows: int, cols: int) -> np.ndarray:
        return rng.normal(0, cols**-0.5, (rows, cols)).astype(np.float16)

    ones = np.ones(n_embd, dtype=np.float16)
    tensors = {
        "fc.weight": dense(n_embd, 3 * n_embd),
        "midlayer.input_layernorm.weight": ones,
        "midlayer.hidden_norm.weight": ones,
        "midlayer.self_attn.q_proj.weight": dense(n_embd, 2 * n_embd),
        "midlayer.self_attn.k_proj.weight": dense(n_embd, 2 * n_embd),
        "midlayer.self_attn.v_proj.weight": dense(n_embd, 2 * n_embd),
        "midlayer.self_attn.o_proj.weight": dense(n_embd, n_embd),
        "midlayer.post_attention_layernorm.weight": ones,
        "midlayer.mlp.gate_proj.weight": dense(n_ff, n_embd),
        "midlayer.mlp.up_proj.weight": dense(n_ff, n_embd),
        "midlayer.mlp.down_proj.weight": dense(n_embd, n_ff),
        "norm.weight": ones,
        "lm_head.weight": dense(spec.vocab_size, n_embd),
    }
    safetensors.numpy.save_file(tensors, str(directory / "model.safetensors"))
    config = json.loads((target / "config.json").read_text())
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        num_hidden_layers=1,
        draft_vocab_size=spec.vocab_size,
        target_hidden_size=n_embd,
        name_or_path="specexp-tiny-eagle3",
    )
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(target / name, directory / name)


def _write_gguf(
    path: Path,
    spec: TinyPairSpec,
    embeddings: dict[str, np.ndarray],
    layers: list[dict[str, np.ndarray]],
    name: str,
) -> None:
    logging.getLogger("gguf").setLevel(logging.WARNING)  # its per-file INFO lines are noise here

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"specexp-tiny-{name}")
    writer.add_block_count(len(layers))
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.embedding_length)
    writer.add_feed_forward_length(spec.feed_forward_length)
    writer.add_head_count(spec.head_count)
    writer.add_head_count_kv(spec.head_count)
    writer.add_rope_dimension_count(spec.embedding_length // spec.head_count)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens, merges = _vocabulary(spec.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.NORMAL] * (len(tokens) - 2) + [gguf.TokenType.CONTROL] * 2
    )
    writer.add_token_merges(merges)
    writer.add_bos_token_id(len(tokens) - 2)
    writer.add_eos_token_id(len(tokens) - 1)
    writer.add_add_bos_token(False)
    for tensor_name, array in embeddings.items():
        writer.add_tensor(tensor_name, array)
    for index, layer in enumerate(layers):
        for tensor_name, array in layer.items():
            writer.add_tensor(f"blk.{index}.{tensor_name}", array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str] | None = None) -> None:
    defaults = TinyPairSpec()
    parser = argparse.ArgumentParser(
        prog="python -m specexp.core.tinymodels", description=__doc__.split("\n\n")[0]
    )
    for field in dataclasses.fields(TinyPairSpec):
        parser.add_argument(
            f"--{field.name.replace('_', '-')}",
            type=type(getattr(defaults, field.name)),
            default=getattr(defaults, field.name),
        )
    parser.add_argument(
        "--out", type=Path, default=None, help=f"cache directory (default {models_cache()})"
    )
    parser.add_argument(
        "--format", type=ModelFormat, choices=list(ModelFormat), default=ModelFormat.gguf
    )
    args = vars(parser.parse_args(argv))
    cache_dir, model_format = args.pop("out"), args.pop("format")
    paths = ensure_pair(TinyPairSpec(**args), model_format, cache_dir)
    print(f"target: {paths.target}\ndraft:  {paths.draft}")
    if paths.eagle3:
        print(f"EAGLE-3 head (untrained): {paths.eagle3}")


if __name__ == "__main__":
    main()

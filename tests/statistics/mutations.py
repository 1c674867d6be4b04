"""The defect each guarding statistics test must catch, named where the test is: ``@guards``
sets it on the test (its docstring gives the figures it fails with), and
``test_guards_fail.py`` applies every one in memory and requires its test to fail."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

Test = TypeVar("Test", bound=Callable[..., Any])


@dataclass(frozen=True)
class Mutation:
    """``owner.name`` (a module's function or constant) replaced by what ``mutate`` makes
    of it; ``args``: the case of a parametrized test it is applied to."""

    what: str
    owner: Any
    name: str
    mutate: Callable[[Any], Any]
    args: tuple[Any, ...] = ()


def guards(
    what: str,
    owner: Any,
    name: str,
    mutate: Callable[[Any], Any],
    args: tuple[Any, ...] = (),
) -> Callable[[Test], Test]:
    """Name the mutation a test guards against (see :class:`Mutation`)."""

    def named(test: Test) -> Test:
        test.mutation = Mutation(what, owner, name, mutate, args)  # type: ignore[attr-defined]
        return test

    return named

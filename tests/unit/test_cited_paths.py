"""Every module a text tells a person to run, and every test file it cites, exists: the
README's Faults table once cited a test file at the top of tests/ (it is in process/),
and tinymodels' usage a module path from before the move into bands."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

from specexp.analysis.results import Tag
from tests.conftest import REPO

# The texts checked: the README, the code, its configs and tests, the docs.
TEXTS = [REPO / "README.md"] + [
    p
    for folder in ("specexp", "conf", "tests", "docs", "hydra_plugins", "scripts", "benchmarks")
    for p in sorted((REPO / folder).rglob("*"))
    if p.suffix in (".py", ".yaml", ".md", ".sh") and p.is_file()
]
MODULE = re.compile(r"python -m (specexp(?:\.\w+)*)")
TEST_FILE = re.compile(r"\b(tests/(?:\w+/)*\w+\.py)\b")
# A module or name of specexp a text points to: in a role (:class:`~specexp...`), in
# backticks, or in parentheses "(specexp.core.tinymodels)".
POINTED = re.compile(r"(?:`~?|\()(specexp(?:\.\w+)+)[`)]")


def cited(pattern: re.Pattern[str], path: Path) -> set[str]:
    return set(pattern.findall(path.read_text(errors="replace")))


def test_every_module_a_text_says_to_run_exists():
    missing = {
        f"{path.relative_to(REPO)}: {module}"
        for path in TEXTS
        for module in cited(MODULE, path)
        if importlib.util.find_spec(module) is None
    }
    assert not missing


def test_every_test_file_a_text_cites_exists():
    missing = {
        f"{path.relative_to(REPO)}: {test}"
        for path in TEXTS
        for test in cited(TEST_FILE, path)
        if not (REPO / test).is_file()
    }
    assert not missing


def resolves(dotted: str) -> bool:
    """A module, or a name inside one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            if importlib.util.find_spec(".".join(parts[:cut])) is None:
                continue
        except ModuleNotFoundError:  # a name inside a module, looked for as a submodule
            continue
        found: object = importlib.import_module(".".join(parts[:cut]))
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_every_module_or_name_a_text_points_to_exists():
    """Module paths from before the move into bands (specexp.schemas, specexp.results...)
    do not linger in docstrings and comments. Tags named specexp.* and the log file are
    names, not paths."""
    names = {str(tag) for tag in Tag} | {"specexp.log"}
    missing = {
        f"{path.relative_to(REPO)}: {dotted}"
        for path in TEXTS
        for dotted in cited(POINTED, path) - names
        if not resolves(dotted)
    }
    assert not missing

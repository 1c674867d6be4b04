"""A sweep's observers are split as a job's are: the console prints and never tracks, the
tracker writes to the store and never prints (what it has to tell goes to the ``say`` its
caller gives)."""

from __future__ import annotations

import ast
import inspect

from specexp.sweep import observer


def _names(*code: object) -> set[str]:
    """Every name and attribute the code of ``code`` reads."""
    found: set[str] = set()
    for item in code:
        for node in ast.walk(ast.parse(inspect.getsource(item))):
            if isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.Attribute):
                found.add(node.attr)
    return found


def test_the_tracker_never_prints():
    tracking = _names(observer.SweepTracker, observer.publish_end, observer.publish_left_report)
    assert {"terminal", "print", "console"}.isdisjoint(tracking)
    assert "say" in tracking and "start_run" in tracking  # it does track, and tells through say


def test_the_console_never_tracks():
    printing = _names(observer.SweepConsole)
    assert {"store", "parent", "publish_end", "sweep_facts", "start_run"}.isdisjoint(printing)
    assert "console" in printing  # it does print, to the terminal's console

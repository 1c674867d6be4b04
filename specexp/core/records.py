"""Records written as JSON carry the version of their format; a reader refuses any other."""

from __future__ import annotations

from typing import Any, Mapping


def check_format(what: str, data: Mapping[str, Any], version: int) -> None:
    """Refuse a ``what`` record written in another format than ``version``."""
    found = data.get("format_version")
    if found != version:
        raise ValueError(f"a {what} record of format {found!r}; this specexp reads {version}")

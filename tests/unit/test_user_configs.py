"""A user's own config folder, as both doors take it (``--config-dir DIR`` and
``hydra.searchpath=[file://DIR]``): the validator knows its options, the command line lets
the option through to Hydra, and ``specexp --version`` says which specexp runs."""

from __future__ import annotations

import re
import shutil

import pytest

from specexp import api, cli, hydra_app
from specexp.options import UsageError
from tests.conftest import REPO


@pytest.fixture
def own(tmp_path):
    """A user's folder with one model of their own, a copy of tiny-pair-small."""
    (tmp_path / "model").mkdir()
    shutil.copy(REPO / "conf/model/tiny-pair-small.yaml", tmp_path / "model/mine.yaml")
    return tmp_path


def test_an_option_of_the_users_folder_is_unknown_without_it(own):
    with pytest.raises(UsageError, match="unknown model option 'mine'"):
        api.check_overrides(["model=mine"])


@pytest.mark.parametrize(
    "given",
    [
        lambda own: ["--config-dir", str(own)],
        lambda own: [f"--config-dir={own}"],
        lambda own: ["-cd", str(own)],
        lambda own: [f"hydra.searchpath=[file://{own}]"],
    ],
    ids=["--config-dir DIR", "--config-dir=DIR", "-cd DIR", "hydra.searchpath"],
)
def test_the_validator_knows_the_options_of_the_users_folder(own, given):
    api.check_overrides([*given(own), "model=mine", "workload.max_tokens=16"])
    # A sweep's comma list and a + group take the slower checks, which list the options.
    api.check_overrides(["-m", *given(own), "model=mine,tiny-pair-small", "+sweep=cpu_crossover"])
    with pytest.raises(UsageError, match=re.escape("did you mean 'mine'?")):
        api.check_overrides([*given(own), "model=mne,tiny-pair-small"])
    # The keys of the user's option are checked as conf/'s are.
    said = "unknown key 'model.expected_tok_per'; did you mean 'model.expected_tok_per_s'?"
    with pytest.raises(UsageError, match=re.escape(said)):
        api.check_overrides([*given(own), "model=mine", "model.expected_tok_per=3"])


def test_the_users_folder_extends_the_groups_and_keeps_conf_s(own):
    search, rest = hydra_app.config_search(["-m", "--config-dir", str(own), "model=mine"])
    assert rest == ["-m", "model=mine"]
    assert search.searchpath == (f"file://{own.resolve()}",)
    groups, ours = hydra_app.config_groups(search), hydra_app.config_groups()
    assert groups["model"] == sorted([*ours["model"], "mine"])
    assert {g: o for g, o in groups.items() if g != "model"} == {
        g: o for g, o in ours.items() if g != "model"
    }
    assert hydra_app.compose_config(rest[1:], search).model.name == "tiny-pair-small"


def test_as_hydra_the_config_dir_is_searched_before_the_searchpath(own, tmp_path_factory):
    later = tmp_path_factory.mktemp("later")
    search, _ = hydra_app.config_search([f"hydra.searchpath=[{later}]", "-cd", str(own)])
    assert search.searchpath == (f"file://{own.resolve()}", str(later))
    assert search.overrides == [f"hydra.searchpath=['file://{own.resolve()}','{later}']"]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--config-dir", "no-such-folder"], "no config folder 'no-such-folder'"),
        (["hydra.searchpath=[file://no-such-folder]"], "no config folder 'file://no-such-folder'"),
        (["hydra.searchpath=[pkg://no_such_package]"], "no config folder 'pkg://no_such_package'"),
        (["hydra.searchpath=file://here"], "hydra.searchpath is a list of folders"),
        (["--config-dir"], "--config-dir needs a folder"),
    ],
)
def test_a_folder_that_is_not_one_is_a_usage_error(given, said):
    with pytest.raises(UsageError, match=re.escape(said)):
        api.check_overrides(["model=tiny-pair-small", *given])


def test_the_command_line_passes_the_config_dir_to_hydra_wherever_it_is_given(own):
    parser = cli.build_parser()
    for command in ("run", "sweep", "doctor"):
        before = parser.parse_args([command, "--config-dir", str(own), "model=mine", "a=1"])
        among = parser.parse_args([command, "model=mine", "-cd", str(own), "a=1"])
        for args in (before, among):
            assert cli._hydra_args(args) == [f"--config-dir={own}", "model=mine", "a=1"]
    assert cli._hydra_args(parser.parse_args(["run", "model=mine"])) == ["model=mine"]


def test_the_version_says_which_specexp_runs(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert re.fullmatch(
        r"specexp \d+\.\d+\.\d+\S* from \S+/specexp \(python 3\.\d+\)\n", capsys.readouterr().out
    )

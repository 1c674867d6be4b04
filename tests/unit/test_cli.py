"""The front door without running anything: the command's subcommands and their help,
options declared once with the schema's defaults, usage errors with the nearest spelling."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

import specexp
from specexp import __main__ as specexp_main
from specexp import api, cli, compare_command, history_command, hydra_app, options
from specexp.core import tinymodels, trainedmodels
from specexp.core.schemas.stats import StatsConfig
from specexp.core.schemas.tracking import TrackingConfig

SUBCOMMANDS = ("run", "sweep", "compare", "history", "doctor", "upload", "models", "ui")


def test_every_subcommand_has_its_help(capsys):
    for command in ("", *SUBCOMMANDS):
        with pytest.raises(SystemExit) as exited:
            cli.main([*([command] if command else []), "--help"])
        assert exited.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: specexp {command}".rstrip()), command


def test_options_that_mean_the_same_take_the_schemas_defaults():
    stats, tracking = StatsConfig(), TrackingConfig()
    compared = compare_command.build_parser().parse_args([])
    assert (compared.confidence, compared.threshold, compared.power) == (
        stats.confidence,
        stats.threshold,
        stats.power,
    )
    assert (compared.experiment, compared.tracking_uri) == (tracking.experiment, tracking.uri)
    parser = cli.build_parser()
    told = parser.parse_args(["history"])
    assert (told.confidence, told.experiment) == (stats.confidence, tracking.experiment)
    assert history_command.run is cli.COMMANDS["history"]


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["speculative=drafts"], "unknown speculative option 'drafts'; did you mean 'draft'?"),
        (["specualtive=draft"], "unknown key 'specualtive'; did you mean 'speculative'?"),
        (["engine.thread=1"], "unknown key 'engine.thread'; did you mean 'engine.threads'?"),
        (["speculative=none,draftt"], "did you mean 'draft'?"),
        (["speculative.method=drft"], "did you mean 'draft'? (choices: none, eagle3"),
        (["models"], "not an override: 'models' (an override is key=value"),
        (["workload.max_tokens=[1"], "not an override: 'workload.max_tokens=[1'"),
    ],
)
def test_an_override_typo_is_a_usage_error_naming_the_nearest_spelling(overrides, said, capsys):
    with pytest.raises(options.UsageError, match=re.escape(said)):
        api.check_overrides(overrides)
    assert cli.main(["doctor", *overrides]) == cli.USAGE_EXIT
    assert said in capsys.readouterr().out


@pytest.mark.parametrize(
    "entry",
    [
        ["specexp.cli", "run", "speculative=drafts"],
        ["specexp", "speculative=drafts"],
        ["specexp", "-m", "speculative=none,drafts"],
    ],
)
def test_an_override_typo_exits_2_from_each_entry_point(entry, tmp_path, monkeypatch, capsys):
    """`specexp run`, `python -m specexp` and its sweep, called as their processes call them
    (a process exiting 2 on a refused config: tests/process/test_cli.py and
    test_config_validation.py), with nothing written before the check."""
    monkeypatch.chdir(tmp_path)
    module, *argv = entry
    if module == "specexp.cli":
        status = cli.main(argv)
    else:
        monkeypatch.setattr(sys, "argv", ["specexp", *argv])
        status = specexp_main.main()
    assert status == cli.USAGE_EXIT
    assert "did you mean 'draft'?" in capsys.readouterr().out
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "outputs").exists()


def test_a_type_error_on_the_command_line_is_a_message_not_a_traceback(
    tmp_path, monkeypatch, capsys
):
    """`python -m specexp workload.max_tokens=many`, as its process calls it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["specexp", "workload.max_tokens=many"])
    assert specexp_main.main() == cli.USAGE_EXIT
    out, err = capsys.readouterr()
    assert "Value 'many' of type 'str' could not be converted to Integer" in out
    assert "workload.max_tokens" in out and "Traceback" not in out + err


def test_valid_overrides_pass_the_check():
    api.check_overrides(
        ["model=tiny-pair-small", "speculative=none,draft", "+sweep=reference_cpu", "-m"]
    )
    api.check_overrides(["+stack.versions.cuda=13.0", "engine.threads=1", "hydra.verbose=true"])


def test_one_jobs_overrides_that_compose_are_checked_with_one_composition(monkeypatch):
    """Each start checks its overrides before Hydra composes them again: a job's that
    compose cost one composition, not the group and key checks' two (0.25 CPU-seconds
    against 0.43 at a start)."""
    composed = []

    def counted(overrides, search):
        composed.append(list(overrides))
        return compose(overrides, search)

    compose = hydra_app.compose_config
    monkeypatch.setattr(hydra_app, "compose_config", counted)
    api.check_overrides(["model=tiny-pair-small", "engine.threads=1", "hydra.verbose=true"])
    assert composed == [["model=tiny-pair-small", "engine.threads=1"]]


def test_an_unknown_option_names_the_nearest_one(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["compare", "--baselne", "speculative=none"])
    assert exited.value.code == cli.USAGE_EXIT
    assert "did you mean '--baseline'?" in capsys.readouterr().err


def test_a_module_that_prints_its_usage_names_one_that_runs(capsys):
    """`tinymodels --help` once printed a module path from before the move into bands."""
    for module in (tinymodels, trainedmodels):
        with pytest.raises(SystemExit):
            module.main(["--help"])
        prog = re.match(r"usage: python -m (\S+)", capsys.readouterr().out)
        assert prog and importlib.util.find_spec(prog.group(1)) is not None


def test_the_api_is_exported_at_the_package_root_and_loaded_on_first_use():
    assert set(specexp.__all__) <= set(api.__all__)
    for name in specexp.__all__:
        assert getattr(specexp, name) is getattr(api, name)


def test_a_value_of_the_wrong_type_is_a_usage_error():
    with pytest.raises(options.UsageError, match="could not be converted to Integer"):
        api.check_overrides(["workload.max_tokens=many"])

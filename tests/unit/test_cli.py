"""The command line's generated parts: one ``leaseq serve`` option per
setting, parsed as the config file's values are; the settings table of
docs/operations.md generated from the settings' definitions, and
``leaseq docs --check`` that compares it."""

from __future__ import annotations

import pathlib
import shutil

import pytest
from click.testing import CliRunner

from leaseq.cli import docs
from leaseq.cli.main import main, serve
from leaseq.daemon import config

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_settings_table_in_docs_operations_md_is_current():
    committed = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert committed == docs.with_settings_table(committed), "docs/operations.md's settings table is stale: " \
                                                             "run `leaseq docs`"


def test_the_settings_table_has_one_row_per_setting_with_its_definition():
    rows = docs.settings_table().splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == [f"| `{name}`" for name in config.FIELDS]
    assert "| `segment-size` | `64mb` | bytes | yes |" in docs.settings_table()
    assert "| `port` | `6479` | integer | no |" in docs.settings_table()


@pytest.mark.parametrize("name", sorted(config.FIELDS))
def test_a_default_as_the_file_writes_it_reads_back_as_the_default(name):
    assert config.parse_value(name, config.file_text(name, config.FIELDS[name].default).strip('"')) == \
        config.FIELDS[name].default


def test_docs_check_fails_on_a_stale_settings_table_and_passes_once_written(tmp_path):
    shutil.copy(ROOT / "docs" / "commands.md", tmp_path / "commands.md")
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    (tmp_path / "operations.md").write_text(text.replace("| `port` | `6479` |", "| `port` | `6379` |"))
    runner = CliRunner()
    stale = runner.invoke(main, ["docs", "--check", "--dir", str(tmp_path)])
    assert stale.exit_code == 1 and "operations.md is out of date" in stale.output
    assert runner.invoke(main, ["docs", "--dir", str(tmp_path)]).exit_code == 0
    assert (tmp_path / "operations.md").read_text(encoding="utf-8") == text
    assert runner.invoke(main, ["docs", "--check", "--dir", str(tmp_path)]).exit_code == 0


def test_docs_without_markers_is_an_error_not_a_silent_pass(tmp_path):
    shutil.copy(ROOT / "docs" / "commands.md", tmp_path / "commands.md")
    (tmp_path / "operations.md").write_text("# no table here\n")
    got = CliRunner().invoke(main, ["docs", "--check", "--dir", str(tmp_path)])
    assert got.exit_code == 1 and "no settings table markers" in got.output


def test_serve_has_one_option_per_setting_named_as_in_the_config_file():
    options = {o for p in serve.params for o in p.opts}
    assert options == {f"--{name}" for name in config.FIELDS} | {"--config", "--repair"}
    help_text = CliRunner().invoke(main, ["serve", "--help"]).output
    assert "--http-port N" in help_text and "--protected-mode yes|no" in help_text
    assert "[default: 64mb]" in help_text


def test_flags_are_parsed_as_file_values_and_win_over_file_and_env(tmp_path):
    f = tmp_path / "l.conf"
    f.write_text("fsync-interval 100\nmaxmemory 1mb\nprotected-mode yes\n")
    flags = config.read_flags({"fsync-interval": "200", "maxmemory": "1gb", "protected-mode": None, "port": None})
    s = config.load(str(f), flags, environ={"LEASEQ_FSYNC_INTERVAL": "150", "LEASEQ_PROTECTED_MODE": "no"})
    assert (s.fsync_interval, s.maxmemory, s.protected_mode) == (200, 1024 ** 3, False)


def test_a_bad_flag_names_the_option_and_the_setting():
    with pytest.raises(config.ConfigError, match=r"option --fsync-interval: 'fsync-interval' must be an integer"):
        config.read_flags({"fsync-interval": "1s"})
    got = CliRunner().invoke(main, ["serve", "--loglevel", "loud"])
    assert got.exit_code == 1
    assert "option --loglevel: 'loglevel' must be one of debug, info, warning, error, not 'loud'" in got.output


def test_the_container_image_copies_every_folder_the_wheel_maps():
    """setuptools refuses to build when a folder named in pyproject's
    package-dir is missing, so conf/Dockerfile must COPY each of them (the
    image cannot be built here: no Docker engine)."""
    import re
    import tomllib
    root = pathlib.Path(__file__).resolve().parents[2]
    mapped = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    copied = set(re.findall(r"^COPY (\w+) \./\1$", (root / "conf" / "Dockerfile").read_text(), re.M))
    assert mapped <= copied, f"conf/Dockerfile does not COPY {sorted(mapped - copied)}"


def test_version_says_which_flavour_runs():
    from leaseq.daemon.flavour import FLAVOUR, PROFILE_GUIDED
    result = CliRunner().invoke(main, ["--version"])
    built = ", profile-guided" if PROFILE_GUIDED else ""
    assert result.exit_code == 0 and result.output.rstrip().endswith(f"({FLAVOUR}{built})"), result.output


@pytest.mark.parametrize("acks, says", [("2", "one replica: 1 or 0"), ("1,x", "comma-separated list of numbers")])
def test_bench_failover_refuses_a_mode_it_cannot_run(acks, says):
    result = CliRunner().invoke(main, ["bench", "failover", "--ack", acks])
    assert result.exit_code == 2 and says in result.output

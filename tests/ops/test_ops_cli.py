"""`rtroute run` and `[http]` feed the endpoint: token sources, the new keys, a busy port."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from rtroute.cli import main
from rtroute.config.rtroute_toml import ConfigError, HttpConfig, loads
from rtroute.ops.http import OpsServer
from rtroute.sidecar import service


def test_http_keys_default_to_closed_changes_and_open_reads():
    assert loads("").http == HttpConfig()
    http = loads("[http]\ntoken = \"t\"\nallow_unauthenticated_changes = true\n"
                 "protect_reads = true\n").http
    assert (http.token, http.allow_unauthenticated_changes, http.protect_reads) == \
        ("t", True, True)
    assert not HttpConfig().allow_unauthenticated_changes and not HttpConfig().protect_reads


def test_http_keys_must_be_booleans():
    with pytest.raises(ConfigError, match="protect_reads must be a boolean"):
        loads('[http]\nprotect_reads = "yes"\n')


@pytest.fixture
def served(monkeypatch):
    """Replaces the sidecar's ``serve``: the keyword arguments `rtroute run` passes it."""
    calls: list[dict] = []

    def fake_serve(sidecar, http_listen, http_token=None, on_started=None, shovels=None,
                   **kwargs):
        calls.append(dict(kwargs, listen=http_listen, token=http_token))

    monkeypatch.setattr(service, "serve", fake_serve)
    return calls


def test_run_takes_the_token_from_the_option_env_or_file_over_the_config(
        served, tmp_path, monkeypatch):
    config = tmp_path / "rtroute.toml"
    config.write_text('[http]\ntoken = "from-file-config"\nprotect_reads = true\n'
                      'allow_unauthenticated_changes = true\n[[exchange]]\nname = "logs"\n')
    secret = tmp_path / "token"
    secret.write_text("  from-token-file\n")
    runner = CliRunner()
    monkeypatch.delenv("RTROUTE_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("RTROUTE_HTTP_TOKEN_FILE", raising=False)
    for args, env, token in (
            ([], {}, "from-file-config"),
            (["--token", "from-option"], {}, "from-option"),
            ([], {"RTROUTE_HTTP_TOKEN": "from-env"}, "from-env"),
            (["--token-file", str(secret)], {}, "from-token-file"),
            ([], {"RTROUTE_HTTP_TOKEN_FILE": str(secret)}, "from-token-file")):
        result = runner.invoke(main, ["run", "-c", str(config), *args], env=env)
        assert result.exit_code == 0, result.output
        assert served[-1]["token"] == token
        assert served[-1]["allow_unauthenticated_changes"] is True
        assert served[-1]["protect_reads"] is True


def test_run_without_a_config_passes_closed_changes(served):
    result = CliRunner().invoke(main, ["run", "--rtopic", "logs"], env={})
    assert result.exit_code == 0, result.output
    assert served[-1]["allow_unauthenticated_changes"] is False
    assert served[-1]["protect_reads"] is False


def test_run_refuses_an_empty_token_file(served, tmp_path):
    empty = tmp_path / "token"
    empty.write_text("\n")
    result = CliRunner().invoke(main, ["run", "--rtopic", "logs", "--token-file", str(empty)])
    assert result.exit_code != 0 and "the file is empty" in result.output
    assert served == []


def test_run_reports_a_busy_port_in_one_line():
    busy = OpsServer("127.0.0.1:0", dict).start()
    try:
        listen = f"127.0.0.1:{busy.port}"
        result = CliRunner().invoke(main, ["run", "--rtopic", "logs", "--http", listen])
    finally:
        busy.stop()
    assert result.exit_code == 1
    assert result.output == f"Error: http listen {listen}: address already in use\n"
    assert result.exc_info[0] is SystemExit


@pytest.mark.parametrize("level", ["debug", "DEBUG", "Warning"])
def test_run_takes_the_log_level_in_any_case_as_the_proxy_does(served, level):
    result = CliRunner().invoke(main, ["run", "--rtopic", "logs", "--log-level", level], env={})
    assert result.exit_code == 0, result.output


def test_the_long_running_commands_spell_their_log_options_alike():
    """``--log-level`` and ``--log-format`` are one option pair for ``rtroute run``, ``rtroute
    proxy`` and ``rtroute shovel run`` (before: ``shovel run`` refused ``--log-level debug``
    and ``run`` refused ``--log-format JSON``, which ``proxy`` took)."""
    import click

    from rtroute.cli import main

    commands = [main.commands["run"], main.commands["proxy"],
                main.commands["shovel"].commands["run"]]  # type: ignore[attr-defined]
    for name in ("log_level", "log_format"):
        options = [next(p for p in c.params if p.name == name) for c in commands]
        described = {(tuple(o.type.choices), o.type.case_sensitive, o.default, o.envvar)
                     for o in options}
        assert len(described) == 1, (name, described)
    for command in commands:
        ctx = command.make_context(command.name,
                                   ["--log-level", "debug", "--log-format", "JSON"])
        assert isinstance(ctx, click.Context)
        assert ctx.params["log_level"] == "DEBUG" and ctx.params["log_format"] == "json"

"""[proxy] in rtroute.toml: read with the broker's URI, errors with file:line."""
from __future__ import annotations

import pytest

from rtroute.config.lines import ConfigError
from rtroute.config.rtroute_toml import loads
from rtroute.proxy.config import loads_proxy_settings


def test_the_proxy_table_is_read_with_the_broker_uri():
    settings = loads_proxy_settings(
        '[broker]\nuri = "amqp://u:p@h:5672/v"\n[proxy]\nlisten = ["127.0.0.1:5680"]\n'
        'reuse_port = true\n')
    assert settings.uri == "amqp://u:p@h:5672/v"
    assert settings.listen == ["127.0.0.1:5680"] and settings.reuse_port


def test_a_bad_listen_address_names_its_line():
    with pytest.raises(ConfigError) as raised:
        loads_proxy_settings('[proxy]\nreuse_port = false\nlisten = ["nowhere"]\n', "r.toml")
    assert str(raised.value).startswith("r.toml:3:")


def test_an_unknown_key_gets_a_suggestion():
    with pytest.raises(ConfigError, match="reuse_port"):
        loads_proxy_settings('[proxy]\nreuse_prot = true\n')


def test_tls_listeners_need_a_certificate():
    with pytest.raises(ConfigError, match="certfile"):
        loads_proxy_settings('[proxy]\nlisten_tls = "0.0.0.0:5681"\n')


def test_the_sidecar_config_accepts_a_proxy_table():
    loads('[proxy]\nlisten = "127.0.0.1:5680"\n')


def test_rtroute_config_check_checks_the_proxy_table_too(tmp_path):
    from click.testing import CliRunner

    from rtroute.cli import main

    bad = tmp_path / "bad.toml"
    bad.write_text('[proxy]\nlisten = "127.0.0.1:99999"\n')
    result = CliRunner().invoke(main, ["config", "check", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}:2: proxy: listen" in result.output
    good = tmp_path / "good.toml"
    good.write_text('[proxy]\nlisten = "127.0.0.1:5680"\n')
    result = CliRunner().invoke(main, ["config", "check", str(good)])
    assert result.exit_code == 0 and "a proxy on 127.0.0.1:5680" in result.output


def test_the_ops_endpoint_is_off_unless_the_proxy_table_asks_for_it():
    assert loads_proxy_settings('[proxy]\nlisten = "127.0.0.1:5680"\n').http is None
    settings = loads_proxy_settings('[proxy]\nhttp = "127.0.0.1:9420"\n')
    assert settings.http == "127.0.0.1:9420" and settings.http_token is None


def test_a_bad_http_address_names_its_line():
    with pytest.raises(ConfigError) as raised:
        loads_proxy_settings('[proxy]\nreuse_port = false\nhttp = "nowhere"\n', "r.toml")
    assert str(raised.value).startswith("r.toml:3: proxy: http must be HOST:PORT")
    with pytest.raises(ConfigError, match=r"^r\.toml:2: proxy: http must be a string"):
        loads_proxy_settings('[proxy]\nhttp = 9420\n', "r.toml")


def test_an_http_endpoint_beyond_loopback_needs_a_token(monkeypatch):
    monkeypatch.delenv("RTROUTE_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("RTROUTE_HTTP_TOKEN_FILE", raising=False)
    beyond = '[proxy]\nlisten = "127.0.0.1:5680"\nhttp = "0.0.0.0:9420"\n'
    with pytest.raises(ConfigError, match=r"^r\.toml:3: proxy: http .* a token is required"):
        loads_proxy_settings(beyond, "r.toml")
    assert loads_proxy_settings(beyond + 'http_token = "s3cret"\n').http_token == "s3cret"
    assert loads_proxy_settings(beyond, token_given=True).http == "0.0.0.0:9420"
    monkeypatch.setenv("RTROUTE_HTTP_TOKEN", "s3cret")
    assert loads_proxy_settings(beyond).http == "0.0.0.0:9420"


def test_http_keys_get_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'http_token'"):
        loads_proxy_settings('[proxy]\nhttp_tokn = "x"\n')


def test_the_client_budget_is_read_and_checked_on_its_line():
    assert loads_proxy_settings("[proxy]\n", "r.toml").client_in_flight == 256
    assert loads_proxy_settings("[proxy]\nclient_in_flight = 1000\n",
                                "r.toml").client_in_flight == 1000
    with pytest.raises(ConfigError, match=r"r\.toml:3: .*client_in_flight"):
        loads_proxy_settings('[proxy]\nreuse_port = false\nclient_in_flight = 0\n', "r.toml")
    with pytest.raises(ConfigError, match=r"r\.toml:2: .*client_in_flight"):
        loads_proxy_settings('[proxy]\nclient_in_flight = "many"\n', "r.toml")


def test_the_archive_stream_is_a_queue_name_with_one_placeholder():
    settings = loads_proxy_settings('[proxy]\narchive_stream = "{exchange}.archive"\n')
    assert settings.archive_stream == "{exchange}.archive"
    assert loads_proxy_settings("[proxy]\n").archive_stream is None
    with pytest.raises(ConfigError, match="only placeholder") as raised:
        loads_proxy_settings('[proxy]\nlisten = "127.0.0.1:5680"\narchive_stream = "{name}.a"\n',
                             "r.toml")
    assert str(raised.value).startswith("r.toml:3:")
    with pytest.raises(ConfigError, match="1 to 255 bytes"):
        loads_proxy_settings(f'[proxy]\narchive_stream = "{"a" * 256}"\n')


def test_a_bad_archive_stream_option_is_refused_before_start():
    from click.testing import CliRunner

    from rtroute.cli import main

    result = CliRunner().invoke(main, ["proxy", "--archive-stream", "{exchange"])
    assert result.exit_code == 2 and "only placeholder" in result.output

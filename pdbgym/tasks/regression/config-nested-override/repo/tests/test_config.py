import pytest

from cfgstack.layers import deep_merge, from_environment, layered
from cfgstack.loader import ConfigSyntaxError, load_text
from cfgstack.settings import MissingSetting, server_settings

DEFAULTS = load_text("""
[server]
host = 0.0.0.0
port = 8000

[server.tls]
enabled = true
cert = /etc/app/tls.crt
key = /etc/app/tls.key
verify_clients = false
""", "defaults.ini")


def test_loader_coerces_types():
    assert DEFAULTS["server"]["port"] == 8000
    assert DEFAULTS["server"]["tls"]["enabled"] is True
    assert DEFAULTS["server"]["tls"]["cert"] == "/etc/app/tls.crt"


def test_loader_names_bad_line():
    with pytest.raises(ConfigSyntaxError, match="site.ini:2"):
        load_text("[server]\nport 8000", "site.ini")


def test_environment_overrides_nest():
    env = {"APP__SERVER__PORT": "9000", "APP__SERVER__TLS__VERIFY_CLIENTS": "true", "HOME": "/root"}
    assert from_environment(env) == {"server": {"port": 9000, "tls": {"verify_clients": True}}}


def test_merge_does_not_mutate_inputs():
    base = {"a": {"b": 1}}
    merged = deep_merge(base, {"a": {"c": 2}})
    assert merged == {"a": {"b": 1, "c": 2}} and base == {"a": {"b": 1}}


def test_defaults_alone():
    settings = server_settings(layered(DEFAULTS))
    assert (settings.host, settings.port, settings.tls.cert) == ("0.0.0.0", 8000, "/etc/app/tls.crt")


def test_site_file_overrides_port():
    site = load_text("[server]\nport = 8443", "site.ini")
    settings = server_settings(layered(DEFAULTS, site))
    assert settings.port == 8443 and settings.tls.key == "/etc/app/tls.key"


def test_tls_disabled_needs_no_cert():
    config = {"server": {"host": "localhost", "port": 80, "tls": {"enabled": False}}}
    assert server_settings(config).tls is None


def test_missing_cert_names_env_variable():
    config = {"server": {"host": "h", "port": 1, "tls": {"enabled": True, "key": "k"}}}
    with pytest.raises(MissingSetting, match="APP__SERVER__TLS__CERT"):
        server_settings(config)


def test_site_file_turns_on_client_verification():
    site = load_text("[server.tls]\nverify_clients = true", "site.ini")
    settings = server_settings(layered(DEFAULTS, site))
    assert settings.tls.verify_clients is True and settings.tls.cert == "/etc/app/tls.crt"


def test_environment_rotates_key_only():
    env = from_environment({"APP__SERVER__TLS__KEY": "/run/secrets/tls.key"})
    settings = server_settings(layered(DEFAULTS, env))
    assert settings.tls == settings.tls.__class__("/etc/app/tls.crt", "/run/secrets/tls.key", False)


def test_merge_keeps_untouched_leaves_at_depth():
    merged = deep_merge({"a": {"b": {"c": 1, "d": 2}}, "e": 3}, {"a": {"b": {"c": 30}}})
    assert merged == {"a": {"b": {"c": 30, "d": 2}}, "e": 3}

import pytest

from appconfig import ConfigError, load_settings

SERVICE_INI = """
[server]
host = 0.0.0.0
port = 8100
workers = 3

[log]
json = yes
"""


def test_defaults():
    settings = load_settings()
    assert settings.bind_addresses() == ["127.0.0.1:8000", "127.0.0.1:8001"]
    assert settings.handlers() == ["text-stdout", "prometheus"]


def test_ini_file_overrides_defaults():
    settings = load_settings(SERVICE_INI)
    assert settings.worker_ports() == [8100, 8101, 8102]
    assert settings.log_json is True


def test_env_overrides_text_settings():
    settings = load_settings(SERVICE_INI, {"APP_LOG__LEVEL": "debug", "HOME": "/root"})
    assert settings.log_level == "DEBUG"


def test_env_overrides_win_over_the_file():
    settings = load_settings(SERVICE_INI, {"APP_SERVER__PORT": "9000"})
    assert settings.bind_addresses() == ["0.0.0.0:9000", "0.0.0.0:9001", "0.0.0.0:9002"]


def test_env_can_switch_metrics_off():
    settings = load_settings("", {"APP_FEATURES__METRICS": "off"})
    assert settings.handlers() == ["text-stdout"]


def test_bad_values_name_the_setting():
    with pytest.raises(ConfigError, match="'server.port' must be int"):
        load_settings("[server]\nport = eighty\n")
    with pytest.raises(ConfigError, match="unknown setting 'server.prot'"):
        load_settings("[server]\nprot = 80\n")

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tailrace.config import EXAMPLE_DAGS_FOLDER, ConfigError, Settings, load_settings


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


def write_config(home: Path, text: str) -> Path:
    path = home / "tailrace.toml"
    path.write_text(text)
    return path


def test_defaults(home: Path) -> None:
    settings = load_settings({"TAILRACE_HOME": str(home)})

    assert settings.home == home
    assert settings.database_url == f"sqlite:///{home}/tailrace.db"
    assert settings.log_folder == home / "logs"
    assert settings.dags_folder == EXAMPLE_DAGS_FOLDER
    assert settings.parallelism == 32
    assert settings.worker_processes == max(2, os.cpu_count() or 1)
    assert settings.scheduler_poll_interval == 5.0
    assert settings.max_payload_bytes == 1024 * 1024
    assert (settings.api_host, settings.api_port) == ("127.0.0.1", 8080)
    assert settings.executor == "local"
    assert settings.celery_broker_url is None


def test_home_defaults_to_dot_tailrace_in_the_users_home(tmp_path: Path) -> None:
    assert load_settings({"HOME": str(tmp_path)}).home == tmp_path / ".tailrace"


def test_settings_are_frozen(home: Path) -> None:
    settings = load_settings({"TAILRACE_HOME": str(home)})
    with pytest.raises(AttributeError):
        settings.parallelism = 1  # type: ignore[misc]


def test_the_config_file_overrides_defaults_and_the_environment_overrides_both(
    home: Path,
) -> None:
    write_config(home, "[core]\nparallelism = 8\napi_port = 9000\nload_examples = true\n")

    from_file = load_settings({"TAILRACE_HOME": str(home)})
    from_env = load_settings({"TAILRACE_HOME": str(home), "TAILRACE_PARALLELISM": "4"})

    assert (from_file.parallelism, from_file.api_port, from_file.load_examples) == (8, 9000, True)
    assert (from_env.parallelism, from_env.api_port) == (4, 9000)


def test_the_config_file_may_skip_the_core_table(home: Path) -> None:
    write_config(home, 'executor = "celery"\nscheduler_poll_interval = 2\n')

    settings = load_settings({"TAILRACE_HOME": str(home)})

    assert settings.executor == "celery"
    assert settings.scheduler_poll_interval == 2.0


def test_relative_paths_in_the_config_file_are_relative_to_home(home: Path) -> None:
    write_config(home, '[core]\ndags_folder = "dags"\nlog_folder = "/var/log/tailrace"\n')

    settings = load_settings({"TAILRACE_HOME": str(home)})

    assert settings.dags_folder == home / "dags"
    assert settings.log_folder == Path("/var/log/tailrace")


def test_the_database_url_can_point_at_postgres(home: Path) -> None:
    env = {"TAILRACE_HOME": str(home), "TAILRACE_DATABASE_URL": "postgresql://db/tailrace"}

    assert load_settings(env).database_url == "postgresql://db/tailrace"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("1", True), ("YES", True), ("on", True), ("false", False), ("0", False)],
)
def test_booleans_from_the_environment(home: Path, raw: str, expected: bool) -> None:
    env = {"TAILRACE_HOME": str(home), "TAILRACE_LOAD_EXAMPLES": raw}

    assert load_settings(env).load_examples is expected


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        ("TAILRACE_PARALLELISM", "many", "expected an integer, got 'many'"),
        ("TAILRACE_LOAD_EXAMPLES", "maybe", "expected a boolean"),
        ("TAILRACE_DAG_PARSE_INTERVAL", "soon", "expected a number"),
        ("TAILRACE_WORKER_PROCESSES", "0", "worker_processes must be positive"),
        ("TAILRACE_API_PORT", "70000", "must be a TCP port"),
    ],
)
def test_bad_environment_values_name_the_variable(
    home: Path, variable: str, raw: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        load_settings({"TAILRACE_HOME": str(home), variable: raw})

    assert raised.value.source == f"environment variable {variable}"
    assert str(raised.value).startswith(f"environment variable {variable}: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[core]\nparallelism = 'eight'\n", "key 'parallelism': expected an integer"),
        ("[core]\nparallelism = true\n", "key 'parallelism': expected an integer"),
        ("[core]\nload_examples = 1\n", "key 'load_examples': expected a boolean"),
        ("[core]\nparalelism = 8\n", "key 'paralelism': unknown setting; known ones are"),
        ("[core]\nhome = '/elsewhere'\n", "set TAILRACE_HOME instead"),
        ("parallelism = 1\n[core]\nparallelism = 2\n", r"\['parallelism'\] set both"),
        ("[core\n", "cannot read the config file"),
    ],
)
def test_bad_config_files_name_the_file_and_key(home: Path, text: str, message: str) -> None:
    path = write_config(home, text)

    with pytest.raises(ConfigError, match=message) as raised:
        load_settings({"TAILRACE_HOME": str(home)})

    assert str(path) in str(raised.value)


def test_an_empty_broker_variable_means_none(home: Path) -> None:
    env = {"TAILRACE_HOME": str(home), "TAILRACE_CELERY_BROKER_URL": ""}

    assert load_settings(env).celery_broker_url is None


def test_masked_hides_passwords_and_sensitive_keys(home: Path) -> None:
    settings = load_settings(
        {
            "TAILRACE_HOME": str(home),
            "TAILRACE_DATABASE_URL": "postgresql://tailrace:s3cret@db:5432/tailrace",
            "TAILRACE_CELERY_BROKER_URL": "redis://:hunter2@redis:6379/0",
        }
    )

    masked = settings.masked()

    assert masked["database_url"] == "postgresql://tailrace:***@db:5432/tailrace"
    assert masked["celery_broker_url"] == "***"
    assert masked["home"] == str(home)
    assert masked["parallelism"] == 32
    assert "s3cret" not in repr(masked)
    assert "hunter2" not in repr(masked)
    assert set(masked) == set(Settings.__dataclass_fields__)


def test_masked_leaves_urls_without_passwords_alone(home: Path) -> None:
    masked = load_settings({"TAILRACE_HOME": str(home)}).masked()

    assert masked["database_url"] == f"sqlite:///{home}/tailrace.db"
    assert masked["celery_broker_url"] is None


def test_load_settings_reads_os_environ_by_default(tailrace_home: Path) -> None:
    assert load_settings().home == tailrace_home

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tailrace.config import (
    COMPONENTS,
    DEFAULT_SOURCE,
    EXAMPLE_DAGS_FOLDER,
    SETTING_NAMES,
    ConfigError,
    Settings,
    check_celery_settings,
    load_settings,
    mask_url_password,
)
from tailrace.testing import run_cli


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
    assert masked["celery_broker_url"] == "redis://:***@redis:6379/0"
    assert masked["home"] == str(home)
    assert masked["parallelism"] == 32
    assert "s3cret" not in repr(masked)
    assert "hunter2" not in repr(masked)
    assert set(masked) == set(SETTING_NAMES)
    assert set(Settings.__dataclass_fields__) == {*SETTING_NAMES, "config_file", "sources"}


def test_masked_hides_the_secret_key_whole(home: Path) -> None:
    env = {"TAILRACE_HOME": str(home), "TAILRACE_SECRET_KEY": "k" * 40}

    assert load_settings(env).masked()["secret_key"] == "***"


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        # Not guest:guest: a connection test in the same process may have registered
        # "guest" as a secret, and masking then hides it wherever it appears.
        ("amqp://worker:s3cret@rabbit:5672//", "amqp://worker:***@rabbit:5672//"),
        ("redis://redis:6379/0", "redis://redis:6379/0"),
        (
            "postgresql://db/tr?user=bob&password=hunter2",
            "postgresql://db/tr?user=bob&password=***",
        ),
        (
            "sentinel://:pw1@s1:26379;sentinel://:pw2@s2:26379",
            "sentinel://:***@s1:26379;sentinel://:***@s2:26379",
        ),
        ("not a url", "not a url"),
    ],
)
def test_mask_url_password(url: str, masked: str) -> None:
    assert mask_url_password(url) == masked


def test_masked_leaves_urls_without_passwords_alone(home: Path) -> None:
    masked = load_settings({"TAILRACE_HOME": str(home)}).masked()

    assert masked["database_url"] == f"sqlite:///{home}/tailrace.db"
    assert masked["celery_broker_url"] is None


def test_load_settings_reads_os_environ_by_default(tailrace_home: Path) -> None:
    assert load_settings().home == tailrace_home


def test_every_value_says_where_it_came_from(home: Path) -> None:
    path = write_config(home, "[core]\nparallelism = 8\napi_port = 9000\n")

    settings = load_settings({"TAILRACE_HOME": str(home), "TAILRACE_API_PORT": "9001"})

    assert settings.config_file == path
    assert settings.sources["home"] == "TAILRACE_HOME"
    assert settings.sources["parallelism"] == str(path)
    assert settings.sources["api_port"] == "TAILRACE_API_PORT"
    assert settings.sources["database_url"] == DEFAULT_SOURCE
    assert settings.sources["log_folder"] == DEFAULT_SOURCE
    assert set(settings.sources) == set(SETTING_NAMES)


def test_home_from_the_users_home_is_a_default(tmp_path: Path) -> None:
    assert load_settings({"HOME": str(tmp_path)}).sources["home"] == DEFAULT_SOURCE


def test_tailrace_config_names_the_file_instead_of_home(home: Path, tmp_path: Path) -> None:
    write_config(home, "parallelism = 8\n")
    etc = tmp_path / "etc" / "tailrace.toml"
    etc.parent.mkdir()
    etc.write_text('parallelism = 3\ndags_folder = "dags"\n')

    settings = load_settings({"TAILRACE_HOME": str(home), "TAILRACE_CONFIG": str(etc)})

    assert settings.parallelism == 3
    assert settings.config_file == etc
    assert settings.sources["parallelism"] == str(etc)
    # Relative paths stay relative to TAILRACE_HOME, wherever the file lives.
    assert settings.dags_folder == home / "dags"


def test_tailrace_config_naming_a_missing_file_is_an_error(home: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"

    with pytest.raises(ConfigError, match=r"nope\.toml does not exist") as raised:
        load_settings({"TAILRACE_HOME": str(home), "TAILRACE_CONFIG": str(missing)})

    assert raised.value.source == "environment variable TAILRACE_CONFIG"


def test_an_empty_tailrace_config_means_the_file_in_home(home: Path) -> None:
    path = write_config(home, "parallelism = 8\n")

    settings = load_settings({"TAILRACE_HOME": str(home), "TAILRACE_CONFIG": ""})

    assert (settings.config_file, settings.parallelism) == (path, 8)


def test_errors_in_the_named_config_file_name_it(home: Path, tmp_path: Path) -> None:
    etc = tmp_path / "tailrace.toml"
    etc.write_text("paralelism = 8\n")

    with pytest.raises(ConfigError, match="unknown setting") as raised:
        load_settings({"TAILRACE_HOME": str(home), "TAILRACE_CONFIG": str(etc)})

    assert raised.value.source == f"{etc} key 'paralelism'"


def test_the_execution_api_url_must_be_http(home: Path) -> None:
    env = {"TAILRACE_HOME": str(home), "TAILRACE_EXECUTION_API_URL": "api:8080"}

    with pytest.raises(ConfigError, match="http:// or https:// URL, got 'api:8080'"):
        load_settings(env)


# A complete Celery deployment's settings, each test removing or spoiling one.
POSTGRES = "postgresql://tailrace:pw@db:5432/tailrace"
CELERY = {
    "TAILRACE_EXECUTOR": "celery",
    "TAILRACE_DATABASE_URL": POSTGRES,
    "TAILRACE_CELERY_BROKER_URL": "redis://redis:6379/0",
    "TAILRACE_SECRET_KEY": "s" * 32,
    "TAILRACE_EXECUTION_API_URL": "http://api:8080",
}


def celery_settings(home: Path, **changes: str | None) -> Settings:
    env = {"TAILRACE_HOME": str(home), **CELERY}
    for name, value in changes.items():
        variable = "TAILRACE_" + name.upper()
        if value is None:
            del env[variable]
        else:
            env[variable] = value
    return load_settings(env)


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_complete_celery_deployment_passes_every_check(home: Path, component: str) -> None:
    check_celery_settings(celery_settings(home), component)


@pytest.mark.parametrize(
    ("change", "failing", "message"),
    [
        (
            {"celery_broker_url": None},
            {"scheduler", "worker"},
            "celery_broker_url is not set .*TAILRACE_CELERY_BROKER_URL",
        ),
        (
            {"secret_key": None},
            {"scheduler", "api-server"},
            "secret_key is not set.*TAILRACE_SECRET_KEY",
        ),
        (
            {"secret_key": "short"},
            {"scheduler", "api-server"},
            "secret_key is only 5 bytes long",
        ),
        (
            {"database_url": None},
            {"scheduler", "api-server", "triggerer"},
            "database_url must be PostgreSQL .*got 'sqlite:.*TAILRACE_DATABASE_URL",
        ),
        (
            {"execution_api_url": None, "api_host": "0.0.0.0"},
            {"worker"},
            "execution_api_url is not set, and the default http://0.0.0.0:8080",
        ),
    ],
)
def test_only_the_components_that_need_a_setting_fail_without_it(
    home: Path, change: dict[str, str | None], failing: set[str], message: str
) -> None:
    settings = celery_settings(home, **change)

    for component in COMPONENTS:
        if component in failing:
            with pytest.raises(ConfigError, match=message) as raised:
                check_celery_settings(settings, component)
            assert raised.value.source.startswith(f"tailrace {component}")
            assert str(home / "tailrace.toml") in str(raised.value)
        else:
            check_celery_settings(settings, component)


def test_a_worker_on_the_api_servers_machine_may_use_the_default_url(home: Path) -> None:
    settings = celery_settings(home, execution_api_url=None)

    check_celery_settings(settings, "worker")
    assert settings.execution_api == "http://127.0.0.1:8080"


def test_every_missing_setting_is_named_at_once(home: Path) -> None:
    settings = celery_settings(
        home, celery_broker_url=None, secret_key=None, database_url="mysql://u:hunter2@db/tr"
    )

    with pytest.raises(ConfigError) as raised:
        check_celery_settings(settings, "scheduler")

    message = str(raised.value)
    assert all(name in message for name in ("celery_broker_url", "secret_key", "database_url"))
    assert "mysql://u:***@db/tr" in message
    assert "hunter2" not in message


def test_a_worker_needs_no_database_or_secret(home: Path) -> None:
    env = {
        "TAILRACE_HOME": str(home),
        "TAILRACE_CELERY_BROKER_URL": "amqp://guest:guest@rabbit//",
        "TAILRACE_EXECUTION_API_URL": "https://api.internal",
    }

    check_celery_settings(load_settings(env), "worker")


def test_the_local_executor_checks_nothing_but_workers(home: Path) -> None:
    settings = load_settings({"TAILRACE_HOME": str(home)})

    for component in ("scheduler", "api-server", "triggerer"):
        check_celery_settings(settings, component)
    with pytest.raises(ConfigError, match="celery_broker_url is not set"):
        check_celery_settings(settings, "worker")


def test_an_unknown_component_is_a_programming_error(home: Path) -> None:
    with pytest.raises(ValueError, match="unknown component 'sheduler'"):
        check_celery_settings(load_settings({"TAILRACE_HOME": str(home)}), "sheduler")


def test_the_config_command_shows_each_values_source(home: Path, tmp_path: Path) -> None:
    etc = tmp_path / "tailrace.toml"
    etc.write_text("parallelism = 8\n")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "TAILRACE_HOME": str(home),
        "TAILRACE_CONFIG": str(etc),
        "TAILRACE_DATABASE_URL": "postgresql://bob:hunter2@db/tr",
        "TAILRACE_SECRET_KEY": "hunter3" * 6,
    }

    out = run_cli(env, "config", "--json")

    assert out.returncode == 0, out.stderr
    assert "hunter2" not in out.stdout
    assert "hunter3" not in out.stdout
    report = json.loads(out.stdout)
    assert report["config_file"] == str(etc)
    assert report["settings"]["parallelism"] == {"value": 8, "source": str(etc)}
    assert report["settings"]["database_url"] == {
        "value": "postgresql://bob:***@db/tr",
        "source": "TAILRACE_DATABASE_URL",
    }
    assert report["settings"]["secret_key"] == {"value": "***", "source": "TAILRACE_SECRET_KEY"}
    assert report["settings"]["api_port"] == {"value": 8080, "source": "default"}
    assert report["celery_checks"] == {}

    table = run_cli({**env, "COLUMNS": "200"}, "config")
    assert table.returncode == 0, table.stderr
    assert f"Config file: {etc}" in table.stdout
    row = next(line for line in table.stdout.splitlines() if "parallelism" in line)
    assert str(etc) in row


def test_the_config_command_checks_a_celery_deployment(home: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "TAILRACE_HOME": str(home),
        **CELERY,
        "TAILRACE_SECRET_KEY": "",
    }

    table = run_cli({**env, "COLUMNS": "200"}, "config")
    worker = run_cli(env, "config", "--check", "worker")
    scheduler = run_cli(env, "config", "--json", "--check", "scheduler")
    unknown = run_cli(env, "config", "--check", "sheduler")

    assert table.returncode == 0, table.stderr
    assert "✓ worker: ready" in table.stdout
    assert "✗ tailrace scheduler" in table.stdout
    assert worker.returncode == 0, worker.stderr
    assert scheduler.returncode == 1
    assert "secret_key is not set" in json.loads(scheduler.stdout)["celery_checks"]["scheduler"]
    assert unknown.returncode == 1
    assert "not a component" in unknown.stderr

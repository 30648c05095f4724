"""deploy/: every command the systemd units and the compose file run is a real `tailrace`
command with options that exist, every TAILRACE_ variable they set is a setting, and each
component gets what check_celery_settings says it needs."""

from __future__ import annotations

import configparser
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tailrace.cli import app
from tailrace.config import (
    COMPONENTS,
    EXTRA_VARIABLES,
    SETTING_NAMES,
    check_celery_settings,
    load_settings,
    setting_variable,
)

DEPLOY = Path(__file__).parents[1] / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
COMPOSE = DEPLOY / "compose.yaml"
# What `tailrace-worker@INSTANCE.service` is tried with (%I: the unescaped instance).
WORKER_INSTANCE = "default,reports"
KNOWN_VARIABLES = {setting_variable(name) for name in SETTING_NAMES} | set(EXTRA_VARIABLES)
# Named connections (tailrace.connections) are variables too.
CONNECTION_PREFIX = "TAILRACE_CONN_"
# Commands that land on another branch: checked once they exist.
NOT_YET = {"worker": "`tailrace worker` is built on the main branch (Celery executor)"}


def check_command(args: list[str]) -> None:
    """Fail unless ``tailrace ARGS`` names a command and options it accepts: ``--help``
    after them exits 0 only then (an unknown command or option is a usage error first)."""
    result = CliRunner().invoke(app, [*args, "--help"])
    if result.exit_code == 0:
        return
    missing = re.search(r"No such command '([\w-]+)'", result.output)
    if missing and missing.group(1) in NOT_YET:
        pytest.skip(f"{NOT_YET[missing.group(1)]}; not on this branch yet")
    pytest.fail(f"`tailrace {shlex.join(args)}` is not a valid command:\n{result.output}")


def test_the_command_check_rejects_what_does_not_exist() -> None:
    check_command(["db", "migrate", "--sql"])
    for args in (["nonesuch"], ["scheduler", "--bogus"], ["db", "nonesuch"]):
        with pytest.raises(pytest.fail.Exception, match="is not a valid command"):
            check_command(args)


def check_variables(where: str, env: Mapping[str, object]) -> None:
    unknown = [
        name
        for name in env
        if name.startswith("TAILRACE_")
        and name not in KNOWN_VARIABLES
        and not name.startswith(CONNECTION_PREFIX)
    ]
    assert not unknown, f"{where} sets {unknown}, which are not settings"


# --- systemd units -------------------------------------------------------------------


def read_unit(path: Path) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(path)
    return unit


def unit_args(path: Path) -> list[str]:
    exec_start = read_unit(path)["Service"]["ExecStart"].replace("%I", WORKER_INSTANCE)
    program, *args = shlex.split(exec_start)
    assert Path(program).name == "tailrace", f"{path.name} runs {program}, not tailrace"
    return args


def test_there_is_a_unit_per_component() -> None:
    assert {path.name for path in UNITS} == {
        "tailrace-scheduler.service",
        "tailrace-triggerer.service",
        "tailrace-api-server.service",
        "tailrace-worker@.service",
    }


@pytest.mark.parametrize("path", UNITS, ids=lambda path: path.name)
def test_each_unit_runs_a_real_tailrace_command(path: Path) -> None:
    check_command(unit_args(path))


@pytest.mark.parametrize("path", UNITS, ids=lambda path: path.name)
def test_each_unit_is_supervised_the_same_way(path: Path) -> None:
    unit = read_unit(path)
    service = unit["Service"]

    assert service["User"] == "tailrace"
    assert service["EnvironmentFile"] == "/etc/tailrace/env"
    assert service["Restart"] == "always"
    assert service["KillSignal"] == "SIGTERM"
    # The main process stops its children (parser, local workers, Celery's pool) itself.
    assert service["KillMode"] == "mixed"
    assert int(service["TimeoutStopSec"]) >= 30
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    check_variables(
        path.name, dict(line.split("=", 1) for line in service.get("Environment", "").split())
    )


def test_the_worker_unit_takes_its_queues_from_the_instance_name() -> None:
    args = unit_args(DEPLOY / "systemd" / "tailrace-worker@.service")

    assert args == ["worker", "--queues", WORKER_INSTANCE]


def read_env_file(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if line.strip() and not line.startswith("#")]
    return {name: value for name, value in pairs}


def test_the_example_environment_and_config_file_make_a_celery_deployment(
    tmp_path: Path,
) -> None:
    env = read_env_file(DEPLOY / "systemd" / "env.example")
    check_variables("env.example", env)
    env = {**env, "TAILRACE_CONFIG": str(DEPLOY / "tailrace.toml"), "TAILRACE_HOME": str(tmp_path)}

    settings = load_settings(env)

    assert settings.executor == "celery"
    for component in COMPONENTS:
        check_celery_settings(settings, component)
    assert settings.sources["executor"] == str(DEPLOY / "tailrace.toml")


# --- compose -------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def tailrace_services() -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose()["services"].items()
        if service.get("entrypoint") == ["tailrace"]
    }


_INTERPOLATION = re.compile(r"\$\{(\w+)(?::?[-?])?([^}]*)\}")


def interpolate(value: object) -> str:
    """Compose's ``${VAR:-default}`` as its default, ``${VAR:?message}`` as a value a
    user would have to give (a 64-character key)."""

    def substitute(match: re.Match[str]) -> str:
        return "k" * 64 if "?" in match.group(0) else match.group(2)

    return _INTERPOLATION.sub(substitute, str(value))


def service_env(service: Mapping[str, Any]) -> dict[str, str]:
    return {name: interpolate(value) for name, value in service.get("environment", {}).items()}


def test_compose_has_every_component_and_enough_of_each() -> None:
    services = compose()["services"]

    assert {
        "postgres",
        "redis",
        "migrate",
        "api-server",
        "scheduler",
        "triggerer",
        "worker",
    } <= set(services)
    for name in ("scheduler", "triggerer", "worker"):
        assert services[name]["deploy"]["replicas"] >= 2, name


@pytest.mark.parametrize("name", sorted(tailrace_services()))
def test_each_compose_service_runs_a_real_tailrace_command(name: str) -> None:
    check_command([str(arg) for arg in tailrace_services()[name]["command"]])


@pytest.mark.parametrize("name", sorted(tailrace_services()))
def test_each_compose_service_sets_only_settings(name: str) -> None:
    check_variables(f"compose service {name}", tailrace_services()[name].get("environment", {}))


def test_every_component_waits_for_the_one_shot_migration() -> None:
    services = tailrace_services()

    assert services["migrate"]["command"] == ["db", "migrate"]
    assert services["migrate"]["restart"] == "no"
    for name, service in services.items():
        if name != "migrate":
            assert service["depends_on"]["migrate"] == {
                "condition": "service_completed_successfully"
            }, name


@pytest.mark.parametrize(
    ("name", "component"),
    [
        ("api-server", "api-server"),
        ("scheduler", "scheduler"),
        ("triggerer", "triggerer"),
        ("worker", "worker"),
    ],
)
def test_each_compose_service_has_what_its_component_needs(
    name: str, component: str, tmp_path: Path
) -> None:
    env = {**service_env(tailrace_services()[name]), "TAILRACE_HOME": str(tmp_path)}

    check_celery_settings(load_settings(env), component)


def test_workers_get_no_database_credentials() -> None:
    env = service_env(tailrace_services()["worker"])

    assert "TAILRACE_DATABASE_URL" not in env
    assert "TAILRACE_SECRET_KEY" not in env


def mounts(service: Mapping[str, Any]) -> dict[str, str]:
    """Container path -> source of each volume."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *_ = interpolate(volume).split(":")
        out[target] = source
    return out


def test_dags_and_logs_are_shared_at_the_paths_the_settings_name() -> None:
    services = tailrace_services()
    dags_sources = set()
    for name, service in services.items():
        env = service_env(service)
        dags = env["TAILRACE_DAGS_FOLDER"]
        dags_sources.add(mounts(service)[dags])
        if "TAILRACE_LOG_FOLDER" in env and name != "migrate":
            assert mounts(service)[env["TAILRACE_LOG_FOLDER"]] == "logs", name
    assert len(dags_sources) == 1, "every component mounts the same dags folder"
    assert "logs" in compose()["volumes"]

"""Settings: defaults < ``$TAILRACE_HOME/tailrace.toml`` < ``TAILRACE_<NAME>`` variables.

``load_settings`` is a function of the environment mapping it is given and the config
file that mapping points at, so tests pass their own mapping instead of patching.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tailrace.sdk.errors import TailraceError

ENV_PREFIX = "TAILRACE_"
CONFIG_FILE_NAME = "tailrace.toml"
CONFIG_SECTION = "core"
EXAMPLE_DAGS_FOLDER = Path(__file__).parent / "example_dags"

_SENSITIVE_KEY_PARTS = ("password", "secret", "token", "broker")
_MASK = "***"


class ConfigError(TailraceError, ValueError):
    """A setting has a value that cannot be used; ``source`` says where it came from."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        super().__init__(f"{source}: {message}")


def _default_workers() -> int:
    return max(2, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    home: Path
    database_url: str
    dags_folder: Path = EXAMPLE_DAGS_FOLDER
    # Also parse the bundled examples when dags_folder points elsewhere.
    load_examples: bool = False
    parallelism: int = 32
    worker_processes: int = field(default_factory=_default_workers)
    default_max_active_tasks: int = 16
    # Wake-ups are event driven; this poll is only the safety net.
    scheduler_poll_interval: float = 5.0
    dag_parse_interval: float = 30.0
    log_folder: Path
    max_payload_bytes: int = 1024 * 1024
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    # "local": worker processes of the scheduler; "celery": `tailrace worker` processes
    # on any machine, fed through the broker, reporting through the execution API.
    executor: str = "local"
    celery_broker_url: str | None = None
    # Where Celery workers reach the api-server's execution API (default: api_host:api_port).
    execution_api_url: str | None = None
    # Signs the per-task tokens workers present; the same on schedulers and api-servers.
    secret_key: str | None = None
    # A running remote task whose worker has not been heard from for this long has lost
    # its try; a task queued this long with no worker taking it fails its try too.
    task_heartbeat_timeout: float = 60.0
    task_queued_timeout: float = 600.0
    triggerer_capacity: int = 1000
    # Iterate instances one scheduler pass creates per task: bounds the pass's length.
    iterate_expansion_batch: int = 5000
    # A triggerer renews its leases every third of this; a dead one's triggers move on
    # to another triggerer once it passes.
    trigger_lease_seconds: float = 30.0

    @property
    def execution_api(self) -> str:
        """The execution API's base URL, as workers reach it."""
        return (self.execution_api_url or f"http://{self.api_host}:{self.api_port}").rstrip("/")

    def masked(self) -> dict[str, Any]:
        """Every setting as plain JSON-friendly values, with credentials hidden."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Path):
                value = str(value)
            if value is not None and any(part in f.name for part in _SENSITIVE_KEY_PARTS):
                value = _MASK
            elif isinstance(value, str):
                value = mask_url_password(value)
            out[f.name] = value
        return out


def mask_url_password(value: str) -> str:
    """``scheme://user:***@host/...`` for a URL with a password; anything else unchanged."""
    if "://" not in value:
        return value
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        return value
    if not password:
        return value
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{_MASK}@{hostinfo}"))


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    home = _home(env)
    values: dict[str, Any] = {}
    config_file = home / CONFIG_FILE_NAME
    if config_file.is_file():
        values.update(_read_config_file(config_file, home))
    for name in _FIELDS:
        if name == "home":
            continue
        variable = ENV_PREFIX + name.upper()
        if variable in env:
            values[name] = _parse_env(variable, name, env[variable], env)
    values.setdefault("database_url", f"sqlite:///{home / 'tailrace.db'}")
    values.setdefault("log_folder", home / "logs")
    return Settings(home=home, **values)


def _home(env: Mapping[str, str]) -> Path:
    raw = env.get(ENV_PREFIX + "HOME")
    if raw:
        return _path(raw, env).absolute()
    user_home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return user_home / ".tailrace"


def _path(raw: str, env: Mapping[str, str]) -> Path:
    if raw == "~" or raw.startswith("~/"):
        user_home = env.get("HOME") or str(Path.home())
        raw = user_home + raw[1:]
    return Path(raw)


def _read_config_file(path: Path, home: Path) -> dict[str, Any]:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read the config file: {exc}") from exc
    section = document.pop(CONFIG_SECTION, {})
    if not isinstance(section, dict):
        raise ConfigError(str(path), f"[{CONFIG_SECTION}] must be a table")
    if both := sorted(document.keys() & section.keys()):
        raise ConfigError(str(path), f"{both} set both at the top and in [{CONFIG_SECTION}]")
    values: dict[str, Any] = {}
    for key, raw in {**document, **section}.items():
        source = f"{path} key {key!r}"
        if key == "home":
            raise ConfigError(source, "home is where this file lives; set TAILRACE_HOME instead")
        if key not in _FIELDS:
            raise ConfigError(source, f"unknown setting; known ones are {_known_keys()}")
        value = _check_toml_value(source, key, raw)
        if isinstance(value, Path) and not value.is_absolute():
            value = home / value
        values[key] = _check_range(source, key, value)
    return values


def _known_keys() -> str:
    return ", ".join(sorted(set(_FIELDS) - {"home"}))


def _kind(name: str) -> type:
    annotation = str(_FIELDS[name].type)
    for kind in (bool, int, float, Path):
        if annotation == kind.__name__:
            return kind
    return str


def _check_toml_value(source: str, name: str, raw: Any) -> Any:
    kind = _kind(name)
    if kind is float and isinstance(raw, int) and not isinstance(raw, bool):
        return float(raw)
    if kind is Path and isinstance(raw, str):
        return Path(raw).expanduser()
    expected = str if kind is Path else kind
    # bool is an int in Python but not in TOML: reject `parallelism = true`.
    if isinstance(raw, bool) != (expected is bool) or not isinstance(raw, expected):
        raise ConfigError(source, f"expected {_describe(kind)}, got {raw!r}")
    return raw


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError


_PARSERS: dict[type, Callable[[str], Any]] = {
    bool: _parse_bool,
    int: lambda raw: int(raw.strip()),
    float: lambda raw: float(raw.strip()),
}


def _parse_env(variable: str, name: str, raw: str, env: Mapping[str, str]) -> Any:
    source = f"environment variable {variable}"
    kind = _kind(name)
    if kind is Path:
        return _path(raw, env).absolute()
    if kind is str:
        optional = "None" in str(_FIELDS[name].type)
        return _check_range(source, name, None if optional and not raw else raw)
    try:
        value = _PARSERS[kind](raw)
    except ValueError:
        raise ConfigError(source, f"expected {_describe(kind)}, got {raw!r}") from None
    return _check_range(source, name, value)


def _describe(kind: type) -> str:
    return {
        bool: "a boolean (true/false, 1/0, yes/no, on/off)",
        int: "an integer",
        float: "a number",
        Path: "a path",
        str: "a string",
    }[kind]


_POSITIVE = frozenset(
    {
        "parallelism",
        "worker_processes",
        "default_max_active_tasks",
        "scheduler_poll_interval",
        "dag_parse_interval",
        "max_payload_bytes",
        "triggerer_capacity",
        "trigger_lease_seconds",
        "iterate_expansion_batch",
        "task_heartbeat_timeout",
        "task_queued_timeout",
    }
)
EXECUTORS = ("local", "celery")


def _check_range(source: str, name: str, value: Any) -> Any:
    if name in _POSITIVE and value <= 0:
        raise ConfigError(source, f"{name} must be positive, got {value!r}")
    if name == "api_port" and not 0 < value < 65536:
        raise ConfigError(source, f"api_port must be a TCP port (1-65535), got {value}")
    if name == "database_url" and not value:
        raise ConfigError(source, "database_url must not be empty")
    if name == "executor" and value not in EXECUTORS:
        raise ConfigError(source, f"executor must be one of {', '.join(EXECUTORS)}, got {value!r}")
    return value

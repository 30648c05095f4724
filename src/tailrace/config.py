"""Settings: defaults < the config file < ``TAILRACE_<NAME>`` variables.

The config file is ``$TAILRACE_CONFIG`` when set (it must exist), else
``$TAILRACE_HOME/tailrace.toml`` when present. ``load_settings`` is a function of the
environment mapping it is given and the config file that mapping points at, so tests pass
their own mapping instead of patching. Every value remembers where it came from
(``Settings.sources``), for ``tailrace config``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from tailrace.dagfiles import IGNORE_SYNTAXES
from tailrace.sdk.connections import mask_url
from tailrace.sdk.errors import TailraceError

ENV_PREFIX = "TAILRACE_"
CONFIG_FILE_NAME = "tailrace.toml"
# The config file to read instead of $TAILRACE_HOME/tailrace.toml.
CONFIG_FILE_VARIABLE = "TAILRACE_CONFIG"
HOME_VARIABLE = "TAILRACE_HOME"
DEFAULT_SOURCE = "default"
CONFIG_SECTION = "core"
EXAMPLE_DAGS_FOLDER = Path(__file__).parent / "example_dags"

# Settings hidden whole; other strings only lose the password of a URL they hold.
_SENSITIVE_KEY_PARTS = ("password", "secret", "token", "fernet")
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
    # The slots of default_pool when the scheduler creates it (Airflow's name); after
    # that, `tailrace pools set default_pool N` resizes it.
    default_pool_task_slot_count: int = 128
    worker_processes: int = field(default_factory=_default_workers)
    # Wake-ups are event driven; this poll is only the safety net.
    scheduler_poll_interval: float = 5.0
    dag_parse_interval: float = 30.0
    # On sys.path (with dags_folder) wherever DAG files are imported, as in Airflow.
    plugins_folder: Path
    # New DAGs start paused unless the DAG passes is_paused_upon_creation (Airflow's).
    dags_are_paused_at_creation: bool = True
    # Patterns of .tailraceignore/.airflowignore: "glob" (Airflow 3's default) or "regexp".
    dag_ignore_file_syntax: str = "glob"
    # One DAG file's import may take this long; then it is that file's import error.
    dagbag_import_timeout: float = 30.0
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
    # A Celery worker whose heartbeats (through the broker) stop for this long is lost,
    # and so are the tries it was running (ADR 0024).
    worker_lost_timeout: float = 6.0
    # A try lost with its worker runs again at once, costing no retry, this many times per
    # task instance; then losses are ordinary failures (retries, retry_delay). 0: always.
    lost_try_requeues: int = 3
    triggerer_capacity: int = 1000
    # Iterate instances one scheduler pass creates per task: bounds the pass's length.
    iterate_expansion_batch: int = 5000
    # A triggerer renews its leases every third of this; a dead one's triggers move on
    # to another triggerer once it passes.
    trigger_lease_seconds: float = 30.0
    # A finished run's output streams are kept this long for `tailrace streams replay`
    # (a DAG's stream_retention overrides it); then their items are deleted.
    stream_retention_seconds: float = 7 * 24 * 3600.0
    # A queue trigger's message is recognised as a redelivery this long (to twice this)
    # after its event was acknowledged, though the event itself was pruned (ADR 0032):
    # above the brokers' visibility timeout / ack wait / consumer timeout, with a margin.
    queue_redelivery_window_seconds: float = 3600.0
    # The API's limits: a request body over this is refused with 413 before it is read or
    # authenticated (it must hold a worker's report: max_payload_bytes and an envelope).
    api_max_request_bytes: int = 4 * 1024 * 1024
    # Request handlers (database reads and writes) running at once in one api-server
    # process, each on a thread; the rest wait their turn, in order of arrival. Within
    # the database pool's 5 connections; more only for a database far away.
    api_threads: int = 4
    # Processes serving the API (standalone's children, or an api-server's when over 1),
    # each with its own interpreter lock and api_threads handlers, on one port.
    api_processes: int = 1
    # A client address gets 429 (Retry-After) after this many failed logins in the window.
    auth_rate_limit_attempts: int = 5
    auth_rate_limit_seconds: float = 40.0
    # Encrypts connections at rest (Airflow's fernet_key): comma-separated Fernet keys, the
    # first encrypts, all decrypt; unset: $TAILRACE_HOME/fernet.key, made when first needed.
    fernet_key: str | None = None
    # Prometheus metrics of every process (ADR 0021): /metrics on the api-server, and on
    # metrics_host:metrics_port per component when the port is set (0: no port of its own).
    metrics_enabled: bool = True
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 0
    # Every component's log lines on stderr: "text" for people, "json" (one object a line,
    # with dag_id, run_id, task_id, try and trace ids) for log shippers.
    log_format: str = "text"

    # Not settings: the file read (or that would be read), and where each value came from
    # (DEFAULT_SOURCE, the config file's path, or the environment variable's name).
    config_file: Path | None = field(default=None, compare=False)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def execution_api(self) -> str:
        """The execution API's base URL, as workers reach it."""
        return (self.execution_api_url or f"http://{self.api_host}:{self.api_port}").rstrip("/")

    def masked(self) -> dict[str, Any]:
        """Every setting as plain JSON-friendly values, with credentials hidden."""
        out: dict[str, Any] = {}
        for name in SETTING_NAMES:
            value = getattr(self, name)
            if isinstance(value, Path):
                value = str(value)
            if value is not None and any(part in name for part in _SENSITIVE_KEY_PARTS):
                value = _MASK
            elif isinstance(value, str):
                value = mask_url_password(value)
            out[name] = value
        return out


def override(settings: Settings, name: str, value: Any, source: str) -> Settings:
    """``settings`` with ``name`` set to ``value`` from ``source`` (a command-line option,
    say), checked as the same value from the environment would be."""
    if name not in _FIELDS or name == "home":
        raise ValueError(f"not a setting: {name!r}")
    if isinstance(value, Path):
        value = value.expanduser().absolute()
    value = _check_range(source, name, value)
    return dataclasses.replace(
        settings, **{name: value}, sources=MappingProxyType({**settings.sources, name: source})
    )


def dag_folders(settings: Settings) -> tuple[Path, ...]:
    """The folders parsed for DAGs: ``dags_folder``, then the bundled examples when
    ``load_examples`` is on and ``dags_folder`` is elsewhere."""
    if settings.load_examples and settings.dags_folder.resolve() != EXAMPLE_DAGS_FOLDER.resolve():
        return (settings.dags_folder, EXAMPLE_DAGS_FOLDER)
    return (settings.dags_folder,)


def mask_url_password(value: str) -> str:
    """``scheme://user:***@host/...`` for a URL with a password, secret-named query
    parameters (``?password=***``) masked too, each URL of a ``;``-separated broker list
    alike; a value that is not a URL unchanged."""
    if ";" in value:
        return ";".join(mask_url_password(part) for part in value.split(";"))
    if "://" not in value:
        return value
    return mask_url(value, extras=True)


_META_FIELDS = frozenset({"config_file", "sources"})
_FIELDS = {f.name: f for f in dataclasses.fields(Settings) if f.name not in _META_FIELDS}
# Every setting, in declaration order (``home`` first).
SETTING_NAMES: tuple[str, ...] = tuple(_FIELDS)


def setting_variable(name: str) -> str:
    """The environment variable that sets ``name``: ``TAILRACE_<NAME>``."""
    return ENV_PREFIX + name.upper()


# Variables load_settings reads besides the settings' own.
EXTRA_VARIABLES = (CONFIG_FILE_VARIABLE,)


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    home = _home(env)
    values: dict[str, Any] = {}
    sources = {"home": HOME_VARIABLE if env.get(HOME_VARIABLE) else DEFAULT_SOURCE}
    config_file = config_file_path(env)
    if config_file.is_file():
        from_file = _read_config_file(config_file, home)
        values.update(from_file)
        sources.update(dict.fromkeys(from_file, str(config_file)))
    elif env.get(CONFIG_FILE_VARIABLE):
        raise ConfigError(
            f"environment variable {CONFIG_FILE_VARIABLE}",
            f"the config file {config_file} does not exist or is not a file",
        )
    for name in SETTING_NAMES:
        if name == "home":
            continue
        variable = setting_variable(name)
        if variable in env:
            values[name] = _parse_env(variable, name, env[variable], env)
            sources[name] = variable
    values.setdefault("database_url", f"sqlite:///{home / 'tailrace.db'}")
    values.setdefault("log_folder", home / "logs")
    values.setdefault("plugins_folder", home / "plugins")
    settings = Settings(
        home=home,
        **values,
        config_file=config_file,
        sources=MappingProxyType({name: sources.get(name, DEFAULT_SOURCE) for name in _FIELDS}),
    )
    _check_request_limit(settings)
    return settings


def _check_request_limit(settings: Settings) -> None:
    needed = settings.max_payload_bytes + REPORT_ENVELOPE_BYTES
    if settings.api_max_request_bytes < needed:
        raise ConfigError(
            settings.sources["api_max_request_bytes"],
            f"api_max_request_bytes ({settings.api_max_request_bytes:,}) must be at least "
            f"max_payload_bytes + {REPORT_ENVELOPE_BYTES:,} ({needed:,}): workers' reports "
            "through the execution API hold that much; raise api_max_request_bytes",
        )


def config_file_path(env: Mapping[str, str]) -> Path:
    """``$TAILRACE_CONFIG`` if set, else ``$TAILRACE_HOME/tailrace.toml``; may not exist."""
    explicit = env.get(CONFIG_FILE_VARIABLE)
    if explicit:
        return _path(explicit, env).absolute()
    return _home(env) / CONFIG_FILE_NAME


def _home(env: Mapping[str, str]) -> Path:
    raw = env.get(HOME_VARIABLE)
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
        "default_pool_task_slot_count",
        "worker_processes",
        "scheduler_poll_interval",
        "dag_parse_interval",
        "dagbag_import_timeout",
        "max_payload_bytes",
        "triggerer_capacity",
        "trigger_lease_seconds",
        "stream_retention_seconds",
        "queue_redelivery_window_seconds",
        "iterate_expansion_batch",
        "task_heartbeat_timeout",
        "task_queued_timeout",
        "worker_lost_timeout",
        "api_max_request_bytes",
        "api_threads",
        "api_processes",
        "auth_rate_limit_attempts",
        "auth_rate_limit_seconds",
    }
)
# A worker's report holds up to max_payload_bytes of XComs and stream items, plus this.
REPORT_ENVELOPE_BYTES = 64 * 1024
EXECUTORS = ("local", "celery")
LOG_FORMATS = ("text", "json")


def _check_range(source: str, name: str, value: Any) -> Any:
    if name in _POSITIVE and value <= 0:
        raise ConfigError(source, f"{name} must be positive, got {value!r}")
    if name == "lost_try_requeues" and value < 0:
        raise ConfigError(source, f"lost_try_requeues must be 0 or more, got {value!r}")
    if name == "api_port" and not 0 < value < 65536:
        raise ConfigError(source, f"api_port must be a TCP port (1-65535), got {value}")
    if name == "metrics_port" and not 0 <= value < 65536:
        raise ConfigError(source, f"metrics_port must be a TCP port (1-65535) or 0, got {value}")
    if name == "log_format" and value not in LOG_FORMATS:
        raise ConfigError(source, f"log_format must be text or json, got {value!r}")
    if name == "database_url" and not value:
        raise ConfigError(source, "database_url must not be empty")
    if name == "dag_ignore_file_syntax" and value not in IGNORE_SYNTAXES:
        raise ConfigError(source, f"dag_ignore_file_syntax must be glob or regexp, got {value!r}")
    if name == "executor" and value not in EXECUTORS:
        raise ConfigError(source, f"executor must be one of {', '.join(EXECUTORS)}, got {value!r}")
    if name == "fernet_key" and value:
        _check_fernet_keys(source, value)
    if name == "execution_api_url" and value is not None:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                source,
                "execution_api_url must be the api-server's http:// or https:// URL, "
                f"got {mask_url_password(value)!r}",
            )
    return value


def _check_fernet_keys(source: str, value: str) -> None:
    for position, key in enumerate(value.split(","), 1):
        try:
            valid = len(base64.urlsafe_b64decode(key.strip().encode())) == 32
        except (ValueError, binascii.Error):
            valid = False
        if not valid:
            raise ConfigError(
                source,
                f"fernet_key: key {position} is not a Fernet key (32 url-safe base64-encoded "
                "bytes); make one with `python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'`",
            )


# RFC 7518 3.2: an HMAC-SHA256 key at least as long as the hash.
MIN_SECRET_KEY_BYTES = 32
_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})


def _needs_postgres(settings: Settings) -> str | None:
    if urlsplit(settings.database_url).scheme.split("+", 1)[0] in ("postgresql", "postgres"):
        return None
    return (
        f"database_url must be PostgreSQL (postgresql://USER:PASSWORD@HOST:5432/DB), got "
        f"{mask_url_password(settings.database_url)!r}; {_how_to_set(settings, 'database_url')}"
    )


def broker_problem(settings: Settings) -> str | None:
    """Why a Celery component cannot reach a broker with these settings, or None."""
    if settings.celery_broker_url:
        return None
    return (
        "celery_broker_url is not set (redis://HOST:6379/0 or amqp://USER:PASSWORD@HOST:5672//); "
        + _how_to_set(settings, "celery_broker_url")
    )


def secret_key_problem(settings: Settings) -> str | None:
    """Why ``secret_key`` cannot sign per-try tokens (execution API), or None."""
    size = len((settings.secret_key or "").encode())
    if size >= MIN_SECRET_KEY_BYTES:
        return None
    state = f"only {size} bytes long" if size else "not set"
    return (
        f"secret_key is {state}: it signs the tokens workers present and must be the same on "
        f"every scheduler and api-server, at least {MIN_SECRET_KEY_BYTES} random bytes "
        f"(`openssl rand -hex 32`); {_how_to_set(settings, 'secret_key')}"
    )


def _needs_execution_api(settings: Settings) -> str | None:
    if settings.execution_api_url is not None or settings.api_host not in _WILDCARD_HOSTS:
        return None
    return (
        f"execution_api_url is not set, and the default {settings.execution_api} is where the "
        "api-server listens, not an address a worker can reach (http://API-SERVER-HOST:8080); "
        + _how_to_set(settings, "execution_api_url")
    )


def _how_to_set(settings: Settings, name: str) -> str:
    file = settings.config_file or CONFIG_FILE_NAME
    return f"set {name} in {file} or the environment variable {setting_variable(name)}"


_Check = Callable[[Settings], "str | None"]
# What each component needs to run when executor = "celery"; workers are Celery's
# whatever `executor` says, and need neither database credentials nor the secret key.
_CELERY_NEEDS: dict[str, tuple[_Check, ...]] = {
    "scheduler": (broker_problem, secret_key_problem, _needs_postgres),
    "api-server": (secret_key_problem, _needs_postgres),
    "triggerer": (_needs_postgres,),
    "worker": (broker_problem, _needs_execution_api),
}
COMPONENTS = tuple(_CELERY_NEEDS)


def check_celery_settings(settings: Settings, component: str) -> None:
    """Raise ConfigError naming every setting ``component`` (a ``tailrace`` command in
    COMPONENTS) lacks to run in a Celery deployment, and how to set it."""
    if component not in _CELERY_NEEDS:
        raise ValueError(f"unknown component {component!r}; known: {', '.join(COMPONENTS)}")
    if component != "worker" and settings.executor != "celery":
        return
    problems = [p for check in _CELERY_NEEDS[component] if (p := check(settings)) is not None]
    if problems:
        where = f"tailrace {component}" + (
            "" if component == "worker" else ' with executor = "celery"'
        )
        raise ConfigError(where, "; ".join(problems))

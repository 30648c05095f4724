"""Connections: environment before database, parsing, masking, and the CLI."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import Engine, insert, select

from tailrace.config import ConfigError, load_settings
from tailrace.connections import (
    KEY_FILE_NAME,
    ConnectionDecryptionError,
    FernetKeys,
    StoredConnection,
    add_connection,
    connection_uri,
    connections_from,
    find_connection,
    list_connections,
    rotate_fernet_key,
)
from tailrace.db import create_engine, sqlite_url, upgrade
from tailrace.db.models import Connection as ConnectionRow
from tailrace.sdk.connections import Connection, env_var_name, get_connection, mask_url
from tailrace.sdk.errors import ConnectionNotFoundError, TailraceError
from tailrace.testing import run_cli, stop_component


def test_an_environment_variable_wins_over_the_database(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_connection(engine, "orders-api", "https://db-host/v1")
    with connections_from(engine):
        assert get_connection("orders-api").host == "db-host"
        monkeypatch.setenv("TAILRACE_CONN_ORDERS_API", "https://env-host/v2")
        assert get_connection("orders-api").host == "env-host"


def test_an_unknown_connection_says_where_it_was_looked_for(engine: Engine) -> None:
    with connections_from(engine), pytest.raises(ConnectionNotFoundError) as caught:
        get_connection("nope.api")
    assert caught.value.env_var == "TAILRACE_CONN_NOPE_API"
    assert "tailrace connections add nope.api" in str(caught.value)


def test_adding_twice_needs_replace(engine: Engine) -> None:
    add_connection(engine, "a", "sqlite:///x.db")
    with pytest.raises(TailraceError, match="already exists"):
        add_connection(engine, "a", "sqlite:///y.db")
    add_connection(engine, "a", "sqlite:///y.db", replace=True)
    assert [c.uri for c in list_connections(engine)] == ["sqlite:///y.db"]


def test_a_uri_is_parsed_and_never_shows_its_password() -> None:
    conn = Connection.from_uri(
        "pg", "postgresql://etl:p%40ss%2Fw0rd@db.internal:6543/warehouse?sslmode=require"
    )
    assert (conn.conn_type, conn.host, conn.port, conn.login) == (
        "postgresql",
        "db.internal",
        6543,
        "etl",
    )
    assert conn.password == "p@ss/w0rd"
    assert conn.schema == "warehouse"
    assert conn.extra == {"sslmode": "require"}
    assert conn.masked_uri == "postgresql://etl:***@db.internal:6543/warehouse?sslmode=require"
    assert mask_url("sqlite:///x.db?key=k&mode=ro", extras=True) == "sqlite:///x.db?key=***&mode=ro"
    assert mask_url("http://[::1", extras=True) == "***"
    assert "w0rd" not in repr(conn)
    assert env_var_name("my-api.v2") == "TAILRACE_CONN_MY_API_V2"


def test_resolved_secrets_are_masked_in_every_log_line_and_traceback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(
        "TAILRACE_CONN_VAULT", "https://robot:hunter2-long@vault/?api_token=t0k3n-abc"
    )
    get_connection("vault")
    log = logging.getLogger("tailrace.test.masking")
    with caplog.at_level(logging.INFO, "tailrace.test.masking"):
        log.info("password %s and token %s", "hunter2-long", "t0k3n-abc")
        log.info("url-encoded: %s", "hunter2%2Dlong".replace("%2D", "-"))
        try:
            raise RuntimeError("connect failed with hunter2-long")
        except RuntimeError:
            log.exception("boom")
    text = caplog.text
    assert "hunter2-long" not in text and "t0k3n-abc" not in text
    assert "password *** and token ***" in text
    assert "connect failed with ***" in text
    assert mask_url("https://u:hunter2-long@h/?q=1") == "https://u:***@h/?q=1"


@pytest.fixture
def cli_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    dags = tmp_path / "dags"
    dags.mkdir()
    return {
        **os.environ,
        "TAILRACE_DATABASE_URL": database_url,
        "TAILRACE_DAGS_FOLDER": str(dags),
    }


def test_cli_add_list_delete_masks_passwords(cli_env: dict[str, str]) -> None:
    added = run_cli(
        cli_env, "connections", "add", "wh", "--uri", "postgresql://etl:s3cr3t-pw@db/wh"
    )
    assert added.returncode == 0, added.stderr
    assert "s3cr3t-pw" not in added.stdout and "etl:***@db" in added.stdout
    env = {**cli_env, "TAILRACE_CONN_API": "https://:env-t0ken-9@api.example.com"}
    listed = run_cli(env, "connections", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert rows == [
        {
            "conn_id": "api",
            "uri": "https://:***@api.example.com",
            "description": None,
            "source": "env TAILRACE_CONN_API",
        },
        {
            "conn_id": "wh",
            "uri": "postgresql://etl:***@db/wh",
            "description": None,
            "source": "database",
        },
    ]
    table = run_cli(env, "connections", "list")
    assert "s3cr3t-pw" not in table.stdout and "env-t0ken-9" not in table.stdout
    assert run_cli(cli_env, "connections", "delete", "wh").returncode == 0
    missing = run_cli(cli_env, "connections", "delete", "wh")
    assert missing.returncode == 1 and "no stored connection 'wh'" in missing.stderr
    bad_port = run_cli(cli_env, "connections", "add", "x", "--uri", "http://u:pw-9@h:99999")
    assert bad_port.returncode == 1 and "Port out of range" in bad_port.stderr
    assert "pw-9" not in bad_port.stderr


def test_demo_api_command_serves_on_the_port_it_prints() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tailrace",
            "demo-api",
            "--port",
            "0",
            "--pages",
            "2",
            "--page-size",
            "3",
            "--token",
            "tk",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:
            if match := re.search(r"Demo API on (http://\S+)", line):
                url = match.group(1)
                break
        page = httpx.get(f"{url}/orders/link", headers={"Authorization": "Bearer tk"})
        assert [o["id"] for o in page.json()] == [1, 2, 3]
        assert 'rel="next"' in page.headers["link"]
        assert httpx.get(f"{url}/orders").status_code == 401
    finally:
        # uvicorn shuts down, then re-raises the SIGTERM it caught.
        assert stop_component(proc) in (0, -signal.SIGTERM)


def test_tasks_test_finds_stored_connections_and_masks_them(cli_env: dict[str, str]) -> None:
    dags = Path(cli_env["TAILRACE_DAGS_FOLDER"])
    (dags / "peek.py").write_text(
        "import logging\n"
        "from datetime import datetime\n"
        "from tailrace import dag, task\n"
        "from tailrace.sdk.connections import get_connection\n"
        "@dag(schedule=None, start_date=datetime(2026, 1, 1))\n"
        "def peek():\n"
        "    @task\n"
        "    def show():\n"
        "        conn = get_connection('svc')\n"
        "        logging.getLogger('peek').info('password %s', conn.password)\n"
        "        return conn.host\n"
        "    show()\n"
        "peek()\n"
    )
    added = run_cli(cli_env, "connections", "add", "svc", "--uri", "https://u:pw-0987654@svc.local")
    assert added.returncode == 0, added.stderr
    result = run_cli(cli_env, "tasks", "test", "peek", "show")
    assert result.returncode == 0, result.stderr
    assert "XCom return_value = 'svc.local'" in result.stdout
    assert "password ***" in result.stderr
    assert "pw-0987654" not in result.stdout + result.stderr


# --- encryption at rest -------------------------------------------------------------------


def _raw_rows(engine: Engine) -> list[tuple[str, str, bool]]:
    with engine.connect() as conn:
        return [
            (r.conn_id, r.uri, r.is_encrypted)
            for r in conn.execute(
                select(ConnectionRow.conn_id, ConnectionRow.uri, ConnectionRow.is_encrypted)
            )
        ]


def test_stored_connections_are_encrypted_at_rest(engine: Engine, tailrace_home: Path) -> None:
    add_connection(engine, "wh", "postgresql://etl:s3cr3t-pw@db/wh")
    [(_, raw, is_encrypted)] = _raw_rows(engine)
    assert is_encrypted and "s3cr3t-pw" not in raw and "etl" not in raw
    # Without fernet_key the key is made in TAILRACE_HOME, for its owner only.
    key_file = tailrace_home / KEY_FILE_NAME
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert [c.uri for c in list_connections(engine)] == ["postgresql://etl:s3cr3t-pw@db/wh"]
    with connections_from(engine):
        assert get_connection("wh").password == "s3cr3t-pw"


def test_plain_text_rows_from_before_encryption_keep_working_until_rotated(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        conn.execute(insert(ConnectionRow).values(conn_id="old", uri="https://u:pw-old@h/"))
    with engine.connect() as conn:
        assert connection_uri(conn, "old") == "https://u:pw-old@h/"
    assert rotate_fernet_key(engine) == 1
    [(_, raw, is_encrypted)] = _raw_rows(engine)
    assert is_encrypted and "pw-old" not in raw
    assert find_connection(engine, "old") == StoredConnection("old", "https://u:pw-old@h/", None)


def test_a_key_is_rotated_by_putting_the_new_one_first(engine: Engine, tmp_path: Path) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    unused = tmp_path / "no-key-file"
    add_connection(engine, "api", "https://:t0ken-abc@api/", keys=FernetKeys(old, unused))
    assert rotate_fernet_key(engine, FernetKeys(f"{new},{old}", unused)) == 1
    assert find_connection(engine, "api", FernetKeys(new, unused)) is not None
    with pytest.raises(ConnectionDecryptionError) as caught:
        find_connection(engine, "api", FernetKeys(old, unused))
    assert "connection 'api'" in str(caught.value) and "fernet_key" in str(caught.value)


def test_the_fernet_key_setting_is_checked_and_masked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="key 2 is not a Fernet key"):
        load_settings(
            {
                "TAILRACE_HOME": str(tmp_path),
                "TAILRACE_FERNET_KEY": f"{Fernet.generate_key().decode()},nope",
            }
        )
    key = Fernet.generate_key().decode()
    loaded = load_settings({"TAILRACE_HOME": str(tmp_path), "TAILRACE_FERNET_KEY": key})
    assert loaded.masked()["fernet_key"] == "***"


def test_cli_rotate_fernet_key(cli_env: dict[str, str]) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    env = {**cli_env, "TAILRACE_FERNET_KEY": old}
    assert (
        run_cli(env, "connections", "add", "wh", "--uri", "postgresql://e:pw-1@db/wh").returncode
        == 0
    )
    rotated = run_cli({**env, "TAILRACE_FERNET_KEY": f"{new},{old}"}, "rotate-fernet-key", "--json")
    assert rotated.returncode == 0, rotated.stderr
    assert json.loads(rotated.stdout) == {"connections": 1, "key": "fernet_key"}
    listed = run_cli({**env, "TAILRACE_FERNET_KEY": new}, "connections", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)[0]["uri"] == "postgresql://e:***@db/wh"
    stale = run_cli(env, "connections", "list")
    assert stale.returncode == 1 and "is encrypted with a key" in stale.stderr


def test_a_new_sqlite_database_file_is_private(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "tailrace.db"
    engine = create_engine(sqlite_url(db))
    try:
        upgrade(engine)
        add_connection(engine, "wh", "postgresql://etl:pw@db/wh")
        for path in (db, db.with_name("tailrace.db-wal")):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        (
            "https://h/x?passwd=a1&pwd=b2&sig=c3&auth=d4&X-Amz-Signature=e5&sessionId=f6&X-Auth=g",
            "https://h/x?passwd=***&pwd=***&sig=***&auth=***&X-Amz-Signature=***&sessionId=***"
            "&X-Auth=***",
        ),
        (
            "https://h/x?author=ada&signal=on&design=flat&page=2",
            "https://h/x?author=ada&signal=on&design=flat&page=2",
        ),
        (
            "https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/org/repo.git",
            "https://***@github.com/org/repo.git",
        ),
        ("ssh://git@github.com/org/repo.git", "ssh://git@github.com/org/repo.git"),
        ("postgresql://etl_reader@db/wh", "postgresql://etl_reader@db/wh"),
    ],
)
def test_secret_looking_url_parts_are_masked(uri: str, shown: str) -> None:
    assert mask_url(uri, extras=True) == shown


def test_a_token_in_the_user_part_is_masked_in_logs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    token = "glpat-9f8e7d6c5b4a39281706"
    monkeypatch.setenv("TAILRACE_CONN_GITLAB", f"https://{token}@gitlab.example.com/")
    get_connection("gitlab")
    with caplog.at_level(logging.INFO, "tailrace.test.masking"):
        logging.getLogger("tailrace.test.masking").info("cloning with %s", token)
    assert token not in caplog.text and "cloning with ***" in caplog.text


def test_a_connection_this_process_cannot_decrypt_is_an_error_naming_it(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    add_connection(engine, "api", "https://:t0ken-abc@api/", keys=FernetKeys(None, tmp_path / "a"))
    other = FernetKeys(None, tmp_path / "b")
    other.encrypt("makes key file b")
    # In a trigger (or `tasks test`): get_connection fails with the reason.
    with connections_from(engine), pytest.raises(ConnectionDecryptionError, match="'api'"):
        get_connection("api")
    # Answering a worker (the scheduler's I/O thread, the execution API): logged, and
    # answered as missing, so the component answering carries on.
    with engine.connect() as conn, caplog.at_level(logging.ERROR, "tailrace.connections"):
        assert connection_uri(conn, "api", other) is None
    assert "connection 'api' is encrypted with a key" in caplog.text

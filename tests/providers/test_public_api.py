"""The providers' public names are pinned; the HTTP side imports no database code."""

from __future__ import annotations

import json
import subprocess
import sys

import tailrace.providers.http
import tailrace.providers.rabbitmq
import tailrace.providers.redis
import tailrace.providers.sql
import tailrace.sdk.connections


def test_http_all_is_pinned() -> None:
    assert sorted(tailrace.providers.http.__all__) == sorted(
        [
            "HttpHook",
            "RETRYABLE_STATUSES",
            "retry_after_seconds",
            "HttpOperator",
            "PaginatedHttpOperator",
            "HttpSensor",
            "HttpSensorAsync",
            "HttpTrigger",
            "HttpSensorTrigger",
            "HttpPaginationTrigger",
            "Pagination",
            "HttpError",
            "PageError",
        ]
    )


def test_sql_all_is_pinned() -> None:
    assert sorted(tailrace.providers.sql.__all__) == sorted(
        [
            "SqlHook",
            "jsonable",
            "sqlalchemy_url",
            "upsert",
            "SQLExecuteQueryOperator",
            "SQLInsertRowsOperator",
            "SqlSensor",
            "SqlSensorAsync",
            "SqlSensorTrigger",
            "RowError",
        ]
    )


def test_connections_all_is_pinned() -> None:
    assert sorted(tailrace.sdk.connections.__all__) == sorted(
        [
            "Connection",
            "get_connection",
            "aget_connection",
            "env_var_name",
            "mask_url",
            "mask_secret",
            "redact",
            "ConnectionSource",
            "set_connection_source",
        ]
    )


def test_dag_files_using_http_and_connections_import_no_database_code() -> None:
    code = (
        "import json, sys\n"
        "import tailrace.providers.http, tailrace.sdk.connections\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(out)
    forbidden = ("sqlalchemy", "alembic", "tailrace.db", "tailrace.scheduler", "tailrace.config")
    assert [m for m in loaded if m.startswith(forbidden)] == []


def test_queue_providers_all_is_pinned() -> None:
    assert sorted(tailrace.providers.redis.__all__) == ["DEAD_LETTER_SUFFIX", "RedisStreamTrigger"]
    assert sorted(tailrace.providers.rabbitmq.__all__) == [
        "DEAD_LETTER_SUFFIX",
        "RabbitMQQueueTrigger",
    ]


def test_nats_provider_all_is_pinned() -> None:
    import tailrace.providers.nats

    assert sorted(tailrace.providers.nats.__all__) == ["DEAD_LETTER_SUFFIX", "NatsJetStreamTrigger"]


def test_amazon_provider_all_is_pinned() -> None:
    import tailrace.providers.amazon

    assert sorted(tailrace.providers.amazon.__all__) == sorted(
        [
            "SqsQueueTrigger",
            "CredentialsRefusedError",
            "S3KeySensor",
            "S3KeySensorAsync",
            "S3KeyTrigger",
            "S3ListTrigger",
            "split_s3_url",
            "aws_client",
            "client_options",
        ]
    )

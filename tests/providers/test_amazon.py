"""SQS and S3 against moto's standalone server (a real S3/SQS HTTP endpoint on loopback):
an SQS queue into a PostgreSQL sink exactly once (deleted only after the batch is
committed; kill -9 of the triggerer), redeliveries recognised by MessageId and the
queue's redrive policy taking what is never acknowledged, S3KeySensorAsync with
wildcards in the triggerer, and an S3 listing stream consumed downstream by .iterate()."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from sqlalchemy import Engine

from tailrace.sdk.errors import TailraceError
from tailrace.testing import DagHarness, wait_for

from ._queue_sink import (
    QueueUnderTest,
    _counts,
    _unavailable,
    consumer_dag,
    kill_the_triggerer_mid_stream,
)

REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    """moto's server on a free loopback port, for this module; its endpoint URL."""
    server = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if server is None:
        _unavailable("moto_server is not installed (pip install 'moto[server]')")
        return
    port = _free_port()
    proc = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _listening(port) or proc.poll() is not None, timeout=60)
        assert proc.poll() is None, "moto_server exited at start"
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _conn_uri(endpoint: str) -> str:
    return f"aws://testing:testing@/?region_name={REGION}&endpoint_url={quote(endpoint, safe='')}"


@pytest.fixture
def aws(moto: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TAILRACE_CONN_AWS_DEFAULT", _conn_uri(moto))
    return moto


def _boto(endpoint: str, service: str) -> Any:
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


class Queue:
    """An SQS queue of this test's own, with a dead-letter queue behind its redrive
    policy."""

    def __init__(self, endpoint: str, *, visibility: int, max_receives: int = 5) -> None:
        self.sqs = _boto(endpoint, "sqs")
        name = f"tailrace-test-{uuid.uuid4().hex[:10]}"
        self.dead_url = self.sqs.create_queue(QueueName=name + "-dlq")["QueueUrl"]
        dead_arn = self.sqs.get_queue_attributes(
            QueueUrl=self.dead_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        policy = {"deadLetterTargetArn": dead_arn, "maxReceiveCount": str(max_receives)}
        self.url = self.sqs.create_queue(
            QueueName=name,
            Attributes={"VisibilityTimeout": str(visibility), "RedrivePolicy": json.dumps(policy)},
        )["QueueUrl"]

    def publish(self, first: int, count: int) -> None:
        for start in range(first, first + count, 10):
            entries = [
                {"Id": str(n), "MessageBody": str(n)}
                for n in range(start, min(start + 10, first + count))
            ]
            self.sqs.send_message_batch(QueueUrl=self.url, Entries=entries)

    def _counts(self, url: str) -> tuple[int, int]:
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        got = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        return int(got[names[0]]), int(got[names[1]])

    def drained(self) -> bool:
        return self._counts(self.url) == (0, 0)

    def in_flight(self) -> bool:
        return self._counts(self.url)[1] > 0

    def dead_letters(self) -> int:
        return sum(self._counts(self.dead_url))

    def delete(self) -> None:
        for url in (self.url, self.dead_url):
            self.sqs.delete_queue(QueueUrl=url)


def _consumer(sink: Engine, queue_url: str) -> str:
    return consumer_dag(
        "sqs_to_sink",
        sink,
        imports="from tailrace.providers.amazon import SqsQueueTrigger",
        trigger=f"SqsQueueTrigger(sqs_queue={queue_url!r}, wait_time_seconds=1)",
    )


@pytest.mark.timeout(300)
def test_an_sqs_queue_reaches_the_sink_once_each_and_is_drained(
    harness: DagHarness, write_dag: Any, aws: str, sink: Engine
) -> None:
    queue = Queue(aws, visibility=30)
    try:
        write_dag("sqs_to_sink.py", _consumer(sink, queue.url))
        # moto answers a receive in tens of milliseconds (seconds on a loaded machine):
        # fewer messages than for the other brokers.
        queue.publish(0, 100)
        harness.parse()
        harness.trigger("sqs_to_sink")
        with harness.running():
            queue.publish(100, 100)
            wait_for(lambda: (_counts(sink)[0] == 200 and queue.drained()) or None, timeout=240)
        assert _counts(sink) == (200, 200, 200)
        assert queue.dead_letters() == 0
    finally:
        queue.delete()


@pytest.mark.exclusive
@pytest.mark.timeout(400)
@pytest.mark.parametrize("db_backend", ["postgres"])
def test_kill_9_of_the_triggerer_mid_stream_loses_and_repeats_nothing(
    database_url: str, dags_folder: Path, engine: Engine, moto: str, sink: Engine
) -> None:
    # Undeleted messages of the dead triggerer reappear after 5 s; the survivor's stay
    # invisible long enough to be committed and deleted first.
    queue = Queue(moto, visibility=5, max_receives=50)
    try:
        kill_the_triggerer_mid_stream(
            QueueUnderTest(
                dag_id="sqs_to_sink",
                dag_source=_consumer(sink, queue.url),
                env={"TAILRACE_CONN_AWS_DEFAULT": _conn_uri(moto)},
                publish=queue.publish,
                drained=queue.drained,
                in_flight=queue.in_flight,
            ),
            database_url=database_url,
            dags_folder=dags_folder,
            engine=engine,
            sink=sink,
            total=600,
        )
        assert queue.dead_letters() == 0
    finally:
        queue.delete()


def test_a_message_never_acknowledged_comes_again_with_its_id_then_to_the_redrive_queue(
    aws: str,
) -> None:
    from tailrace.providers.amazon import SqsQueueTrigger

    queue = Queue(aws, visibility=1, max_receives=2)
    try:
        queue.publish(0, 1)
        trigger = SqsQueueTrigger(sqs_queue=queue.url, wait_time_seconds=1)

        async def two_deliveries() -> list[Any]:
            events = trigger.run()
            try:
                return [await anext(events), await anext(events)]
            finally:
                await events.aclose()
                await trigger.cleanup()

        first, again = asyncio.run(two_deliveries())
        assert first.dedup_key == again.dedup_key  # a redelivery, recognisable by MessageId
        assert (first.payload["receive_count"], again.payload["receive_count"]) == (1, 2)

        # Received maxReceiveCount times and never deleted: SQS moves it to the redrive
        # policy's queue on the first receive once it is visible again.
        def moved() -> bool:
            got = queue.sqs.receive_message(QueueUrl=queue.url, WaitTimeSeconds=1)
            assert not got.get("Messages")
            return queue.dead_letters() == 1

        wait_for(moved, timeout=60)
    finally:
        queue.delete()


def test_a_connection_that_is_not_aws_or_has_unknown_extras_is_refused() -> None:
    from tailrace.providers.amazon import client_options
    from tailrace.sdk.connections import Connection

    with pytest.raises(TailraceError, match="not 'aws'"):
        client_options(Connection.from_uri("c", "https://example.com"))
    with pytest.raises(TailraceError, match="role_arn"):
        client_options(Connection.from_uri("c", "aws://k:s@/?role_arn=x"))
    options = client_options(Connection.from_uri("c", _conn_uri("http://127.0.0.1:1")))
    assert options["endpoint_url"] == "http://127.0.0.1:1"
    assert options["region_name"] == REGION


@pytest.fixture
def bucket(aws: str) -> Iterator[tuple[Any, str]]:
    s3 = _boto(aws, "s3")
    name = f"tailrace-test-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    try:
        yield s3, name
    finally:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            for obj in page.get("Contents", []):
                s3.delete_object(Bucket=name, Key=obj["Key"])
        s3.delete_bucket(Bucket=name)


SENSOR = """
from datetime import datetime
from tailrace import dag
from tailrace.providers.amazon import S3KeySensor, S3KeySensorAsync


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def wait_for_s3():
    S3KeySensorAsync(
        task_id="csv", bucket_name={bucket!r}, bucket_key="in/*.csv", wildcard_match=True,
        poke_interval=0.2, timeout=120,
    )
    S3KeySensor(
        task_id="by_url", bucket_key=["s3://{bucket}/in/ready"], poke_interval=0.2, timeout=120,
    )


wait_for_s3()
"""


def test_s3_key_sensors_wait_for_a_wildcard_in_the_triggerer_and_a_url_by_poking(
    harness: DagHarness, write_dag: Any, bucket: tuple[Any, str]
) -> None:
    s3, name = bucket
    write_dag("wait_for_s3.py", SENSOR.format(bucket=name))
    harness.parse()
    run = harness.trigger("wait_for_s3")
    with harness.running():
        wait_for(lambda: harness.states(run).get("csv") == "deferred" or None, timeout=60)
        s3.put_object(Bucket=name, Key="in/orders.json", Body=b"{}")  # no match
        s3.put_object(Bucket=name, Key="in/ready", Body=b"")
        wait_for(lambda: harness.states(run).get("by_url") == "success" or None, timeout=60)
        assert harness.states(run)["csv"] == "deferred"
        s3.put_object(Bucket=name, Key="in/orders.csv", Body=b"id\n1\n")
        wait_for(lambda: harness.is_finished(run) or None, timeout=60)
    assert harness.states(run) == {"csv": "success", "by_url": "success"}


def test_s3_key_sensor_arguments_airflow_refuses_too_are_refused() -> None:
    from tailrace.providers.amazon import S3KeySensor

    with pytest.raises(TailraceError, match="relative"):
        S3KeySensor(task_id="a", bucket_name="b", bucket_key="s3://b/k")._bucket_and_keys()
    with pytest.raises(TailraceError, match="wildcard_match and use_regex"):
        S3KeySensor(task_id="b", bucket_key="s3://b/*", wildcard_match=True, use_regex=True)


LISTING = """
from datetime import datetime
from tailrace import BaseOperator, dag, task
from tailrace.providers.amazon import S3ListTrigger


class ListKeys(BaseOperator):
    def execute(self, context):
        trigger = S3ListTrigger(bucket_name={bucket!r}, prefix="data/", page_size=7)
        self.defer(trigger=trigger, method_name="handle_trigger_events")

    def handle_trigger_events(self, events, context):
        for event in events:
            yield {{"page": event.payload["page"],
                   "sizes": [o["Size"] for o in event.payload["objects"]]}}


@task
def page_bytes(page):
    return sum(page["sizes"])


@task
def total(sizes):
    return sum(sizes)


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def list_s3():
    pages = ListKeys(task_id="list_keys", max_batch_size=2).output
    total(page_bytes.iterate(page=pages))


list_s3()
"""


def test_an_s3_listing_streams_page_by_page_into_iterate(
    harness: DagHarness, write_dag: Any, bucket: tuple[Any, str]
) -> None:
    s3, name = bucket
    for n in range(30):
        s3.put_object(Bucket=name, Key=f"data/{n:03}.bin", Body=b"x" * n)
    s3.put_object(Bucket=name, Key="other/skipped.bin", Body=b"x" * 1000)
    write_dag("list_s3.py", LISTING.format(bucket=name))
    harness.parse()
    summary = harness.trigger_and_run("list_s3", timeout=120)
    run = summary["id"] if "id" in summary else harness.runs("list_s3")[-1]
    pages = harness.stream_items(run, "list_keys")
    assert [p["page"] for p in pages] == [1, 2, 3, 4, 5]  # 30 keys, 7 a page
    assert harness.xcom(run, "total") == sum(range(30))

"""Consuming an SQS queue at least once from SQS and exactly once into Tailrace: each
message is an event keyed by its ``MessageId``; it is deleted only when what it produced
is durable, so a crash lets it reappear after its visibility timeout, and the
redelivery, recognised by its id, is dropped."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from tailrace.providers.amazon._client import aws_client
from tailrace.providers.common._queue import Delivery, QueueTrigger

# Answers meaning "these credentials are refused": retried with backoff like a server
# that is down (they may be rotated meanwhile), never taken as "the queue is empty".
_REFUSED = frozenset(
    {
        "AccessDenied",
        "ExpiredToken",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
    }
)


class CredentialsRefusedError(ConnectionError):
    """AWS refused the connection's credentials."""


class SqsQueueTrigger(QueueTrigger[dict[str, Any], str]):
    """Yield the messages of SQS queue ``sqs_queue`` (its URL), each as ``{"id":
    MessageId, "body": text, "attributes": {name: value}, "receive_count": n}`` with its
    ``MessageId`` as the event's ``dedup_key`` and checkpoint.

    Messages are received ``max_messages`` (at most 10) at a time with long polling of
    ``wait_time_seconds``, and deleted (``DeleteMessageBatch``) only when Tailrace has
    made what they produced durable (the asset events of a watcher, or the consuming
    task's output). A triggerer that dies leaves them undeleted: SQS makes them visible
    again after the visibility timeout (``visibility_timeout``, else the queue's), and
    those Tailrace stored already are recognised by their ``MessageId`` and only
    deleted. SQS bodies are text, so no message is poison to the trigger; one whose
    handling fails every retry is never deleted, and the queue's redrive policy (where
    configured) moves it to its dead-letter queue after ``maxReceiveCount`` receives.
    SQS unreachable, or refusing the credentials: the trigger retries with backoff
    (logged) and resumes.

    ``aws_conn_id`` names a connection of type ``aws`` (``aws://KEY:SECRET@/?region_name=
    ...&endpoint_url=...``); ``region_name`` overrides the connection's.
    """

    broker = "SQS queue"

    def __init__(
        self,
        *,
        sqs_queue: str,
        aws_conn_id: str = "aws_default",
        region_name: str | None = None,
        max_messages: int = 10,
        wait_time_seconds: int = 1,
        visibility_timeout: int | None = None,
    ) -> None:
        super().__init__()
        if not 1 <= max_messages <= 10:
            raise ValueError("max_messages must be between 1 and 10 (SQS's limit)")
        if not 0 <= wait_time_seconds <= 20:
            raise ValueError("wait_time_seconds must be between 0 and 20 (SQS's limit)")
        if visibility_timeout is not None and visibility_timeout < 0:
            raise ValueError("visibility_timeout must not be negative")
        self.sqs_queue = sqs_queue
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.max_messages = max_messages
        self.wait_time_seconds = wait_time_seconds
        self.visibility_timeout = visibility_timeout
        self._stack: contextlib.AsyncExitStack | None = None
        self._client: Any = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "tailrace.providers.amazon.SqsQueueTrigger",
            {
                "sqs_queue": self.sqs_queue,
                "aws_conn_id": self.aws_conn_id,
                "region_name": self.region_name,
                "max_messages": self.max_messages,
                "wait_time_seconds": self.wait_time_seconds,
                "visibility_timeout": self.visibility_timeout,
            },
        )

    @property
    def source(self) -> str:
        return self.sqs_queue

    def _unreachable(self) -> tuple[type[BaseException], ...]:
        from botocore.exceptions import (
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            ReadTimeoutError,
        )

        return (
            EndpointConnectionError,
            ConnectionClosedError,
            ConnectTimeoutError,
            ReadTimeoutError,
            OSError,
        )

    async def _call(self, operation: str, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        try:
            return await getattr(self._client, operation)(**kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _REFUSED:
                raise CredentialsRefusedError(f"{operation}: {code}") from exc
            raise

    async def _connect(self) -> None:
        stack = contextlib.AsyncExitStack()
        try:
            self._client = await stack.enter_async_context(
                aws_client("sqs", self.aws_conn_id, region_name=self.region_name)
            )
            # A queue that does not exist fails the trigger here, naming it.
            await self._call("get_queue_attributes", QueueUrl=self.sqs_queue)
        except BaseException:
            await stack.aclose()
            self._client = None
            raise
        self._stack = stack

    async def _pull(self) -> Sequence[dict[str, Any]]:
        options: dict[str, Any] = {
            "QueueUrl": self.sqs_queue,
            "MaxNumberOfMessages": self.max_messages,
            "WaitTimeSeconds": self.wait_time_seconds,
            "MessageSystemAttributeNames": ["ApproximateReceiveCount"],
            "MessageAttributeNames": ["All"],
        }
        if self.visibility_timeout is not None:
            options["VisibilityTimeout"] = self.visibility_timeout
        reply = await self._call("receive_message", **options)
        messages: list[dict[str, Any]] = reply.get("Messages", [])
        return messages

    def _decode(self, message: dict[str, Any]) -> Delivery[str]:
        key = str(message["MessageId"])
        attributes = {
            name: value.get("StringValue", value.get("BinaryValue"))
            for name, value in message.get("MessageAttributes", {}).items()
        }
        count = int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1))
        payload = {
            "id": key,
            "body": message.get("Body", ""),
            "attributes": {k: v if isinstance(v, str) else repr(v) for k, v in attributes.items()},
            "receive_count": count,
        }
        return Delivery(key, payload, str(message["ReceiptHandle"]))

    async def _ack(self, receipts: list[str]) -> None:
        for i in range(0, len(receipts), 10):
            entries = [
                {"Id": str(n), "ReceiptHandle": handle}
                for n, handle in enumerate(receipts[i : i + 10])
            ]
            reply = await self._call(
                "delete_message_batch", QueueUrl=self.sqs_queue, Entries=entries
            )
            # A stale receipt (the message became visible again meanwhile) fails: the
            # message comes again, is recognised, and is deleted with its new receipt.
            for failed in reply.get("Failed", []):
                self.log.warning(
                    "SQS did not delete a message of %r: %s",
                    self.sqs_queue,
                    failed.get("Message") or failed.get("Code"),
                )

    async def _disconnect(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            try:
                await stack.aclose()
            except Exception:  # a broken connection may fail to close: it is gone anyway
                self.log.debug("closing the SQS client failed", exc_info=True)

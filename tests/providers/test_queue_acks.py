"""The RabbitMQ trigger's cumulative acknowledgement (``multiple=True``) never covers a
delivery whose outcome is not durable yet: acknowledged out of order, the earlier
deliveries stay unacknowledged and come back when the connection goes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .test_rabbitmq_queues import AMQP, _messages, _publish, queue

__all__ = ["queue"]


def test_out_of_order_acks_leave_the_older_deliveries_to_be_redelivered(
    queue: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tailrace.providers.rabbitmq import RabbitMQQueueTrigger

    conn, name = queue
    monkeypatch.setenv("TAILRACE_CONN_RABBITMQ_DEFAULT", AMQP)
    _publish(conn, name, 0, 10)
    trigger = RabbitMQQueueTrigger(queue=name, prefetch=100)

    async def scenario() -> tuple[list[str], list[str]]:
        events = trigger.run()
        first = [(await anext(events)).dedup_key for _ in range(10)]
        assert first == [f"m-{n}" for n in range(10)]
        # m-0 and m-1 are not durable yet; the rest are: one cumulative ack would be wrong.
        await trigger.acknowledge(first[2:])
        # m-2 .. m-9 settled; then m-1, and the front (m-0) still holds.
        await trigger.acknowledge(["m-1"])
        await events.aclose()
        await trigger.cleanup()  # the connection goes: what is unacknowledged comes back
        assert await asyncio.to_thread(_messages, name) == 1  # m-0, nothing acked early
        again = trigger.run()
        redelivered = [(await anext(again)).dedup_key]
        await trigger.acknowledge(redelivered)
        await again.aclose()
        await trigger.cleanup()
        return first, redelivered

    _, redelivered = asyncio.run(scenario())
    assert redelivered == ["m-0"]
    assert _messages(name) == 0

"""The outbox between the triggers and the database thread: order, room, retries."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from tailrace.triggerer._runner import Outbox
from tailrace.triggerer._store import Envelope


def envelope(seq: int) -> Envelope:
    return Envelope(1, 1, "run", seq, str(seq), False, None, datetime.now(UTC))


def test_a_batch_that_failed_to_write_goes_back_in_front_in_order() -> None:
    async def scenario() -> list[int]:
        outbox = Outbox(limit=100)
        for seq in range(5):
            outbox.put(envelope(seq))
        failed = await outbox.take(3)
        outbox.put(envelope(5))
        outbox.retry(failed)
        return [e.sequence_index for e in await outbox.take(10)]

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4, 5]


def test_producers_wait_for_room_and_shutdown_waits_until_all_is_written() -> None:
    async def scenario() -> None:
        outbox = Outbox(limit=4)
        for seq in range(4):
            outbox.put(envelope(seq))
        assert outbox.full()
        room = asyncio.ensure_future(outbox.room())
        drained = asyncio.ensure_future(outbox.drained())
        await outbox.take(1)
        outbox.written()  # 3 left: not below half the limit yet
        await asyncio.sleep(0)
        assert not room.done() and not drained.done()
        await outbox.take(2)
        outbox.written()
        await asyncio.wait_for(room, 5)
        assert not drained.done()
        await outbox.take(10)
        outbox.written()
        await asyncio.wait_for(drained, 5)

    asyncio.run(scenario())

"""A try's log: the worker's lines and, for a deferred task, its trigger's lines.

``follow=true`` streams the file as it grows (chunked ``text/plain``) until the try has
ended and its last lines are written.
"""

from __future__ import annotations

import asyncio
import codecs
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, PlainTextResponse, Response, StreamingResponse
from sqlalchemy import select

from tailrace.api._context import ApiContext, context
from tailrace.api._json import StrictJsonRoute
from tailrace.api._live import EventStreamResponse, sse
from tailrace.api._params import DagId, MapIndex, RunId, TaskId
from tailrace.api._rows import task_instance_row
from tailrace.api.errors import NotFound
from tailrace.api.models import INT32_MAX
from tailrace.db.models import TaskInstance
from tailrace.execution import log_path_for
from tailrace.state import TaskInstanceState as TIS

router = APIRouter(tags=["Logs"], route_class=StrictJsonRoute)
Ctx = Annotated[ApiContext, Depends(context)]

# A try in one of these states may still write to its log.
_LIVE = frozenset({TIS.SCHEDULED, TIS.QUEUED, TIS.RUNNING, TIS.DEFERRED})
# A log file only grows: look for new lines this often while following.
POLL_SECONDS = 0.2
# After the try ended, its worker writes its last buffered lines just after reporting.
SETTLE_SECONDS = 1.0
_CHUNK = 64 * 1024
EVENT_STREAM_LOG: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "`log` events, then `end`."}
}


@dataclass(frozen=True)
class _LogFile:
    path: FilePath
    task_instance_id: int
    task_id: str
    try_number: int


def _log_file(
    ctx: Ctx,
    dag_id: DagId,
    run_id: RunId,
    task_id: TaskId,
    try_number: Annotated[int, Path(ge=1, le=INT32_MAX)],
    map_index: MapIndex = -1,
) -> _LogFile:
    """The try's log file (which may not exist yet), or 404 for a try there has not been."""
    with ctx.readonly.connect() as conn:
        ti = task_instance_row(conn, dag_id, run_id, task_id, map_index)
    if try_number > ti.try_number:
        raise NotFound(
            f"{task_id} has had {ti.try_number} tries; there is no try {try_number}",
            code="log_not_found",
        )
    path = log_path_for(ctx.settings.log_folder, dag_id, run_id, task_id, map_index, try_number)
    if not path.resolve().is_relative_to(FilePath(ctx.settings.log_folder).resolve()):
        raise NotFound(f"try {try_number} of {task_id} has no log", code="log_not_found")
    return _LogFile(path, int(ti.id), task_id, try_number)


LogFile = Annotated[_LogFile, Depends(_log_file)]
LOG = "/dags/{dag_id}/runs/{run_id}/task-instances/{task_id}/logs/{try_number}"


@router.get(
    LOG,
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}, "description": "The log text."}},
)
def get_log(
    ctx: Ctx,
    log: LogFile,
    follow: Annotated[
        bool, Query(description="Keep streaming new lines until the try has ended.")
    ] = False,
) -> Response:
    if follow:
        return StreamingResponse(
            _follow(ctx, log.path, log.task_instance_id, log.try_number),
            media_type="text/plain; charset=utf-8",
        )
    if not log.path.is_file():
        raise NotFound(
            f"try {log.try_number} of {log.task_id} has no log yet", code="log_not_found"
        )
    return FileResponse(log.path, media_type="text/plain; charset=utf-8")


@router.get(LOG + "/events", response_class=EventStreamResponse, responses=EVENT_STREAM_LOG)
def get_log_events(
    ctx: Ctx,
    log: LogFile,
    last_event_id: Annotated[
        str | None, Header(max_length=20, pattern=r"^[0-9]+$", include_in_schema=False)
    ] = None,
) -> Response:
    """The log as Server-Sent Events, for the web UI's live tail: `log` events carry new
    text (their id is the byte offset reached, so a reconnecting browser resumes there),
    then one `end` event once the try has ended and its last lines are written."""
    offset = int(last_event_id) if last_event_id else 0

    async def events() -> AsyncIterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        position = offset
        async for chunk in _follow(ctx, log.path, log.task_instance_id, log.try_number, offset):
            position += len(chunk)
            yield sse("log", json.dumps(decoder.decode(chunk)), str(position))
        yield sse("end", "{}", str(position))

    return EventStreamResponse(events())


def _read_from(path: FilePath, offset: int) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(_CHUNK)
    except FileNotFoundError:
        return b""


def _try_live(ctx: ApiContext, ti_id: int, try_number: int) -> bool:
    with ctx.readonly.connect() as conn:
        row = conn.execute(
            select(TaskInstance.state, TaskInstance.try_number).where(TaskInstance.id == ti_id)
        ).first()
    return row is not None and row.try_number == try_number and row.state in _LIVE


async def _follow(
    ctx: ApiContext, path: FilePath, ti_id: int, try_number: int, offset: int = 0
) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    ended_at: float | None = None
    while not ctx.closing.is_set():
        chunk = await run_in_threadpool(_read_from, path, offset)
        if chunk:
            offset += len(chunk)
            yield chunk
            continue
        if ended_at is None:
            if not await run_in_threadpool(_try_live, ctx, ti_id, try_number):
                ended_at = loop.time()
        elif loop.time() - ended_at > SETTLE_SECONDS:
            return
        await asyncio.sleep(POLL_SECONDS)

"""Answers to what a running task asks its owner: XCom values, stream pages, connections,
asset events, variables.

The local executor's I/O thread and the api-server's execution API both answer with this.
A request that writes (``VariableWrite``: ``Variable.set``/``delete``) must be answered on
a connection in a transaction the caller commits; the others read.
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from tailrace.assets import answer_asset_events
from tailrace.connections import connection_uri
from tailrace.db.models import Stream, StreamItem, TaskInstance, XCom
from tailrace.execution.protocol import (
    ConnectionReply,
    DeleteVariable,
    GetAssetEvents,
    GetConnection,
    GetStreamItems,
    GetVariable,
    SetVariable,
    StreamItemsReply,
    StreamRef,
    VariableReply,
    WorkerReply,
    WorkerRequest,
    XComReply,
    XComRow,
)
from tailrace.variables import answer_variable, remove_variable, write_variable


def answer_worker_request(conn: Connection, req: WorkerRequest) -> WorkerReply:
    if isinstance(req, GetConnection):
        return ConnectionReply(req.conn_id, connection_uri(conn, req.conn_id))
    if isinstance(req, GetAssetEvents):
        return answer_asset_events(conn, req)
    if isinstance(req, GetVariable):
        return VariableReply(req.key, answer_variable(conn, req.key))
    if isinstance(req, SetVariable):
        write_variable(conn, req.key, req.value, req.description)
        return VariableReply(req.key, req.value)
    if isinstance(req, DeleteVariable):
        return VariableReply(req.key, req.key if remove_variable(conn, req.key) else None)
    if isinstance(req, GetStreamItems):
        return StreamItemsReply(
            list(
                conn.scalars(
                    select(StreamItem.value)
                    .where(
                        StreamItem.stream_id == req.stream_id,
                        StreamItem.index >= req.start,
                    )
                    .order_by(StreamItem.index)
                    .limit(req.limit)
                )
            )
        )
    q = select(XCom.task_id, XCom.map_index, XCom.value).where(
        XCom.dag_run_id == req.dag_run_id,
        XCom.task_id.in_(req.task_ids),
        XCom.key == req.key,
    )
    if req.map_indexes is not None:
        q = q.where(XCom.map_index.in_(req.map_indexes))
    rows = [XComRow(*row) for row in conn.execute(q)]
    streams = []
    if req.key == "return_value":
        # A streaming task's output is its stream: the worker reads it lazily.
        streams = [
            StreamRef(*row)
            for row in conn.execute(
                select(TaskInstance.task_id, TaskInstance.map_index, Stream.id, Stream.length)
                .join(Stream, Stream.task_instance_id == TaskInstance.id)
                .where(
                    TaskInstance.dag_run_id == req.dag_run_id,
                    TaskInstance.task_id.in_(req.task_ids),
                )
            )
        ]
    return XComReply(rows, streams)

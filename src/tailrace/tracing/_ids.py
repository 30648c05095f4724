"""Trace and span ids every process derives alike from what it knows of a run.

One trace per DAG run: its id is a hash of the run, so the scheduler, the api-server, a
triggerer and the UI name the same trace without storing it. The spans that several
processes hang children on (the run, each try, each trigger run) get ids derived the same
way: a child can name its parent before the parent, which is written when it ends, exists.
"""

from __future__ import annotations

import hashlib

__all__ = ["run_span_id", "run_trace_id", "trace_id_hex", "trigger_run_span_id", "try_span_id"]


def _digest(size: int, *parts: object) -> int:
    text = "\x00".join(str(p) for p in parts).encode("utf-8", "surrogatepass")
    value = int.from_bytes(hashlib.blake2b(text, digest_size=size).digest(), "big")
    return value or 1  # zero is the invalid id


def run_trace_id(dag_id: str, run_id: str, dag_run_id: int) -> int:
    """The trace of one DAG run (the row's id tells apart a run deleted and made again)."""
    return _digest(16, "tailrace-run", dag_id, run_id, dag_run_id)


def run_span_id(trace_id: int) -> int:
    return _digest(8, trace_id, "run")


def try_span_id(trace_id: int, ti_id: int, try_number: int) -> int:
    return _digest(8, trace_id, "try", ti_id, try_number)


def trigger_run_span_id(trace_id: int, trigger_run_id: str) -> int:
    return _digest(8, trace_id, "trigger-run", trigger_run_id)


def trace_id_hex(trace_id: int) -> str:
    return f"{trace_id:032x}"

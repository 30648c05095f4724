"""Tracebacks as users read them: from the first frame of their code on.

A task's, a trigger's or a DAG file's error passes through Tailrace's own frames (the
worker, the triggerer's loop, the file loader and ``importlib`` under it) before reaching
the user's; those leading frames say nothing about the failure and push it off screen.
"""

from __future__ import annotations

import os
import traceback
from types import TracebackType

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_IMPORT_MACHINERY = "<frozen importlib."


def _ours(tb: TracebackType) -> bool:
    filename = tb.tb_frame.f_code.co_filename
    return filename.startswith(PACKAGE_DIR) or filename.startswith(_IMPORT_MACHINERY)


def user_traceback(exc: BaseException) -> str:
    """``exc`` formatted from its first frame outside Tailrace (and the import machinery);
    all of it when it was raised inside Tailrace itself. A file that does not compile has
    no frame of its own: its ``SyntaxError`` alone says where."""
    tb = exc.__traceback__
    while tb is not None and _ours(tb):
        tb = tb.tb_next
    if tb is None and isinstance(exc, SyntaxError) and exc.filename:
        return "".join(traceback.format_exception_only(exc))
    if tb is None:
        return "".join(traceback.format_exception(exc))
    return "".join(traceback.format_exception(type(exc), exc, tb))

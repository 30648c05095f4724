"""Path and query parameters shared by several routes, validated before any query runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import StringConstraints

from tailrace.api.models import ID_MAX, ID_PATTERN, INT32_MAX, RUN_ID_PATTERN

DagId = Annotated[str, Path(pattern=ID_PATTERN, max_length=ID_MAX)]
RunId = Annotated[str, Path(pattern=RUN_ID_PATTERN, max_length=ID_MAX)]
TaskId = Annotated[str, Path(pattern=ID_PATTERN, max_length=ID_MAX)]
MapIndex = Annotated[
    int, Query(ge=-1, le=INT32_MAX, description="-1 for an unmapped task instance.")
]
DbId = Annotated[int, Path(ge=1, le=INT32_MAX)]
TaskIdText = Annotated[str, StringConstraints(pattern=ID_PATTERN, max_length=ID_MAX)]

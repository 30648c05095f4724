"""Helpers available in templates as ``{{ macros.<name> }}``."""

from __future__ import annotations

import datetime as _dt
import json
import random
import time
import uuid
from datetime import datetime, timedelta

__all__ = ["datetime", "ds_add", "ds_format", "json", "random", "time", "timedelta", "uuid"]


def ds_add(ds: str, days: int) -> str:
    """Add ``days`` (may be negative) to a ``YYYY-MM-DD`` date string."""
    return (_dt.date.fromisoformat(ds) + timedelta(days=days)).isoformat()


def ds_format(ds: str, input_format: str, output_format: str) -> str:
    """Re-format the date string ``ds`` from ``input_format`` to ``output_format``."""
    return datetime.strptime(ds, input_format).strftime(output_format)

"""HTTP on httpx: a hook with pooling, timeouts and retries, operators, a sensor and a
streaming pagination trigger.

Connections are URIs (``https://login:password@host/base``, ``https://:token@host``):
see :mod:`tailrace.sdk.connections` and ``docs/concepts/providers.md``.
"""

from tailrace.providers.errors import HttpError, PageError
from tailrace.providers.http._hook import RETRYABLE_STATUSES, HttpHook, retry_after_seconds
from tailrace.providers.http._operators import HttpOperator, PaginatedHttpOperator
from tailrace.providers.http._pagination import Pagination
from tailrace.providers.http._sensors import HttpSensor, HttpSensorAsync
from tailrace.providers.http._triggers import (
    HttpPaginationTrigger,
    HttpSensorTrigger,
    HttpTrigger,
)

__all__ = [  # noqa: RUF022 - grouped by concept
    "HttpHook",
    "RETRYABLE_STATUSES",
    "retry_after_seconds",
    # operators and sensors
    "HttpOperator",
    "PaginatedHttpOperator",
    "HttpSensor",
    "HttpSensorAsync",
    # triggers and pagination
    "HttpTrigger",
    "HttpSensorTrigger",
    "HttpPaginationTrigger",
    "Pagination",
    # errors
    "HttpError",
    "PageError",
]

"""Errors of the providers: what failed, where (URL, page, row), and the remote's answer."""

from __future__ import annotations

from typing import Any

from tailrace.sdk.errors import TailraceError

__all__ = ["HttpError", "PageError", "ProviderError", "RowError"]


class ProviderError(TailraceError):
    """Root of the errors a provider raises."""


class HttpError(ProviderError):
    """An HTTP request failed: a status that is not retried, or retries ran out."""

    def __init__(
        self, *, method: str, url: str, status: int | None, body: str = "", reason: str = ""
    ) -> None:
        self.method = method
        self.url = url  # credentials masked
        self.status = status
        self.body = body  # an excerpt, secrets masked
        what = f"returned {status}" if status is not None else "failed"
        message = f"{method} {url} {what}"
        if reason:
            message += f" ({reason})"
        if body:
            message += f": {body}"
        super().__init__(message)


class PageError(ProviderError):
    """A page of a paginated API could not be used: not JSON, or no items where expected."""

    def __init__(self, *, page: int, url: str, problem: str) -> None:
        self.page = page
        self.url = url
        super().__init__(f"page {page} ({url}) {problem}")


class RowError(ProviderError):
    """A row of a batch was refused by the database; the batch was rolled back."""

    def __init__(
        self, *, table: str, key: dict[str, Any], batch: int, position: int, message: str
    ) -> None:
        self.table = table
        self.key = key
        self.batch = batch
        self.position = position
        super().__init__(
            f"row {position} of batch {batch} (key {key}) was refused by table {table!r}: "
            f"{message}",
            hint="Earlier batches are committed; this batch was rolled back. Fix the row and "
            "retry: the upsert on the key makes a retry insert nothing twice.",
        )

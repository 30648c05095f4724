from __future__ import annotations

from typing import Any, Final


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def extract(document: Any, path: str | None) -> Any:
    """The value at a dotted ``path`` in a JSON ``document`` (``data.results``,
    ``items.0.id``); ``MISSING`` when any step is absent. ``None`` or ``""`` is the
    document itself. A key containing dots (``@odata.nextLink``) is found whole first."""
    if not path:
        return document
    if isinstance(document, dict) and path in document:
        return document[path]
    head, dot, rest = path.partition(".")
    if isinstance(document, dict):
        if head not in document:
            return MISSING
        value = document[head]
    elif isinstance(document, list) and head.lstrip("-").isdigit():
        index = int(head)
        if not -len(document) <= index < len(document):
            return MISSING
        value = document[index]
    else:
        return MISSING
    return extract(value, rest) if dot else value

"""What the providers share: a small dotted-path extractor for JSON documents."""

from tailrace.providers.common._jsonpath import MISSING, extract

__all__ = ["MISSING", "extract"]

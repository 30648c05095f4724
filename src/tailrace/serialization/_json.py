"""One JSON codec for every payload Tailrace stores or sends (XCom, events, stream items)."""

from __future__ import annotations

from typing import Any

import msgspec

from tailrace.sdk.timezone import json_default

# pendulum's DateTime/Duration (datetime subclasses) encode as their stdlib bases.
_encoder = msgspec.json.Encoder(enc_hook=json_default)
_decoder = msgspec.json.Decoder()


def dumps(value: Any) -> str:
    """Encode ``value`` as JSON text; raises ``TypeError`` naming the offending type."""
    try:
        return _encoder.encode(value).decode()
    except (TypeError, msgspec.EncodeError) as exc:
        raise TypeError(f"{exc}; values must be JSON-serializable") from exc


def loads(text: str | bytes) -> Any:
    return _decoder.decode(text)

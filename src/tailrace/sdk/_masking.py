"""The secrets masker: every registered secret is replaced by ``***`` in every log line.

Masking happens when a log record is created (a process-wide record factory), so every
handler — a task's log file, a trigger's lines in its task's log, the console — sees
the masked text, tracebacks included.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "***"
# Shorter values would mask ordinary text ("a", "42") all over every log.
MIN_SECRET_LENGTH = 4

# A name (a query parameter, an extra) holding one of these is a secret's...
_SECRET_PARTS = ("password", "passwd", "secret", "token", "key", "credential", "signature")
# ...and so is one with one of these as a whole word (``sig``, ``X-Auth``, not ``signal``
# or ``author``).
_SECRET_WORDS = frozenset({"pwd", "pass", "sig", "auth", "jwt", "session"})
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# A user part with no password that looks like a token (long, with digits): ghp_..., glpat-...
_TOKEN_USER = re.compile(r"^(?=.*\d)[^:@/]{16,}$")

_lock = threading.Lock()
_secrets: frozenset[str] = frozenset()
_installed = False
_formatter = logging.Formatter()


def mask_secret(value: str | None) -> None:
    """Register ``value`` (and its URL-encoded forms) to be masked in every log line."""
    global _secrets
    if not value or len(value) < MIN_SECRET_LENGTH:
        return
    forms = {value, quote(value, safe=""), quote_plus(value)}
    with _lock:
        _install()
        if not forms <= _secrets:
            _secrets = frozenset(_secrets | forms)


def mask_basic_auth(login: str, password: str) -> None:
    """Also mask the ``Authorization: Basic ...`` header value these credentials make."""
    mask_secret(password)
    mask_secret(base64.b64encode(f"{login}:{password}".encode()).decode())


def is_secret_name(name: str) -> bool:
    """Whether a parameter called ``name`` (``api_token``, ``passwd``, ``sig``,
    ``X-Amz-Signature``) holds a secret."""
    lowered = name.lower()
    if any(part in lowered for part in _SECRET_PARTS):
        return True
    return not _SECRET_WORDS.isdisjoint(w.lower() for w in _WORD_SPLIT.split(name) if w)


def is_token_user(user: str) -> bool:
    """Whether the user part of a URL with no password is itself a token."""
    return bool(_TOKEN_USER.match(user))


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    secrets = _secrets
    if not secrets or not text:
        return text
    # Longest first, so a secret containing another is masked whole.
    for secret in sorted(secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def _install() -> None:
    global _installed
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if _secrets:
            _redact_record(record)
        return record

    logging.setLogRecordFactory(factory)
    _installed = True


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a bad format string is the handler's to report
        return
    masked = redact(message)
    if masked != message or record.args:
        record.msg, record.args = masked, None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(_formatter.formatException(record.exc_info))
    if record.stack_info:
        record.stack_info = redact(record.stack_info)

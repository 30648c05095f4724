"""Tracebacks users see start at their own code, not at Tailrace's or importlib's frames."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailrace.dagfiles import load_dag_file
from tailrace.tracebacks import user_traceback


def _frames(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("File ")]


def test_a_dag_files_import_error_starts_at_the_users_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import os\n\ndef helper():\n    raise ValueError('bad config')\n\nhelper()\n")
    (error,) = load_dag_file(str(path)).errors
    frames = _frames(error.stacktrace)
    assert frames == [
        f'File "{path}", line 6, in <module>',
        f'File "{path}", line 4, in helper',
    ], error.stacktrace
    assert error.stacktrace.rstrip().endswith("ValueError: bad config")


def test_a_file_that_does_not_compile_shows_only_where(tmp_path: Path) -> None:
    path = tmp_path / "typo.py"
    path.write_text("x = 1\ndef broken(:\n    pass\n")
    (error,) = load_dag_file(str(path)).errors
    assert error.stacktrace.startswith(f'  File "{path}", line 2'), error.stacktrace
    assert "SyntaxError" in error.stacktrace and "importlib" not in error.stacktrace


def test_an_error_raised_inside_tailrace_keeps_every_frame() -> None:
    with pytest.raises(AttributeError) as raised:
        load_dag_file(42)  # type: ignore[arg-type]
    text = user_traceback(raised.value)
    assert _frames(text), text
    assert all("tailrace" in frame or "<frozen" in frame for frame in _frames(text))

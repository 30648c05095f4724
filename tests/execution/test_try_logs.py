"""A try's log: held while the try is short, live once it has run a while, complete at
its end — with no thread per try and the root logger's level as it was."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from tailrace.execution import _logs, capture_task_logs
from tailrace.execution._logs import (
    drain_task_logs,
    finish_log_later,
    held_log_lines,
    held_log_lines_delivered,
)
from tailrace.testing import wait_for


def test_a_running_try_s_log_goes_live_and_is_complete_at_its_end(tmp_path: Path) -> None:
    path = tmp_path / "dag_id=d" / "run_id=r" / "task_id=t" / "map_index=3" / "attempt=1.log"
    with capture_task_logs(str(path)) as log:
        log.info("before live")
        wait_for(path.exists, timeout=30)
        assert "before live" in path.read_text()
        print("printed while live")
        log.warning("written through")
        assert "written through" in path.read_text()
    text = path.read_text()
    assert text.index("before live") < text.index("printed while live")
    assert "WARNING - written through" in text


def test_a_short_try_writes_its_file_at_its_end(tmp_path: Path) -> None:
    path = tmp_path / "short" / "attempt=1.log"
    with capture_task_logs(str(path)) as log:
        log.info("one line")
    assert path.read_text().endswith("INFO - one line\n")


def test_tries_in_a_row_start_no_thread_each_and_all_go_live(tmp_path: Path) -> None:
    before = threading.active_count()
    for i in range(30):
        with capture_task_logs(str(tmp_path / f"{i}.log")) as log:
            log.info("try %d", i)
    assert threading.active_count() <= before + 1  # the one log thread, at most
    assert all(f"try {i}" in (tmp_path / f"{i}.log").read_text() for i in range(30))
    # A try after the log thread went idle is woken for, and goes live while it runs.
    path = tmp_path / "later.log"
    with capture_task_logs(str(path)) as log:
        log.info("later")
        wait_for(path.exists, timeout=30)


def test_nested_tries_both_go_live(tmp_path: Path) -> None:
    outer, inner = tmp_path / "outer.log", tmp_path / "inner.log"
    with capture_task_logs(str(outer)) as log:
        log.info("outer line")
        with capture_task_logs(str(inner)) as inner_log:
            inner_log.info("inner line")
            wait_for(lambda: outer.exists() and inner.exists(), timeout=30)
    assert "inner line" in inner.read_text()
    assert "outer line" in outer.read_text()


def test_the_root_level_is_restored_after_a_try(tmp_path: Path) -> None:
    root = logging.getLogger()
    previous = root.level
    try:
        for level in (logging.WARNING, logging.INFO, logging.DEBUG):
            root.setLevel(level)
            with capture_task_logs(str(tmp_path / "level.log")) as log:
                assert root.level == logging.INFO
                log.debug("not written")
            assert root.level == level
    finally:
        root.setLevel(previous)
    assert "not written" not in (tmp_path / "level.log").read_text()


def test_a_short_try_whose_lines_were_all_delivered_writes_no_file(tmp_path: Path) -> None:
    # A remote worker's spool: the report carried the held lines to the api-server.
    path = tmp_path / "spool" / "ti-1-try-1.log"
    with capture_task_logs(str(path)) as log:
        log.info("one line")
        held = held_log_lines()
        assert held is not None and held.endswith(b"INFO - one line\n")
        held_log_lines_delivered(len(held))
    assert not path.exists()
    assert not path.parent.exists()


def test_lines_after_the_delivered_ones_put_the_whole_log_in_the_file(tmp_path: Path) -> None:
    # The file keeps its offsets: what was delivered is its first bytes.
    path = tmp_path / "ti-1-try-1.log"
    with capture_task_logs(str(path)) as log:
        log.info("delivered")
        held = held_log_lines()
        assert held is not None
        held_log_lines_delivered(len(held))
        log.info("after the report")
    text = path.read_bytes()
    assert text.startswith(held)
    assert text.endswith(b"INFO - after the report\n")


def test_outside_a_try_nothing_is_held_or_delivered(tmp_path: Path) -> None:
    assert held_log_lines() is None
    held_log_lines_delivered(10)  # no try: nothing to mark
    # ...and nothing carried over to the next try, which writes its file.
    path = tmp_path / "next.log"
    with capture_task_logs(str(path)) as log:
        log.info("next try")
    assert path.read_text().endswith("INFO - next try\n")


def test_a_reported_try_s_file_is_written_after_its_block_and_drained(tmp_path: Path) -> None:
    paths = [tmp_path / f"map_index={i}" / "attempt=1.log" for i in range(20)]
    for i, path in enumerate(paths):
        with capture_task_logs(str(path)) as log:
            log.info("try %d ran", i)
            finish_log_later()
    drain_task_logs()
    assert [p.read_text().count(f"try {i} ran") for i, p in enumerate(paths)] == [1] * 20


def test_a_stint_after_one_still_owed_waits_for_it(tmp_path: Path) -> None:
    """The same try's next stint in this process (a callback of a try, logging to its
    file) writes after the lines the log thread still owes, never before them."""
    path = tmp_path / "attempt=1.log"
    for i in range(10):
        with capture_task_logs(str(path)) as log:
            log.info("stint %d", i)
            finish_log_later()
    with capture_task_logs(str(path)) as log:
        log.info("last stint")
    text = path.read_text()
    order = [text.index(f"stint {i}") for i in range(10)] + [text.index("last stint")]
    assert order == sorted(order)


def test_past_the_files_owed_the_try_writes_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_logs, "MAX_FILES_OWED", 0)
    path = tmp_path / "attempt=1.log"
    with capture_task_logs(str(path)) as log:
        log.info("one line")
        finish_log_later()
    assert path.read_text().endswith("INFO - one line\n")  # no drain needed


def test_a_file_that_cannot_be_finished_is_reported_and_the_next_ones_are_made(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    class Faulty(_logs.TryLogHandler):
        def close(self) -> None:
            super().close()
            raise RuntimeError("the disk went away")

    faulty = Faulty(str(tmp_path / "faulty.log"))
    faulty.emit(logging.LogRecord("t", logging.INFO, __file__, 1, "held", None, None))
    _logs._finisher.close(faulty)
    path = tmp_path / "next.log"
    with capture_task_logs(str(path)) as log:
        log.info("the next try")
        finish_log_later()
    drain_task_logs()
    assert "the next try" in path.read_text()
    assert f"cannot finish the log {tmp_path / 'faulty.log'}" in capfd.readouterr().err

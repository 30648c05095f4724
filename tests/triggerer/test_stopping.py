"""A triggerer that cannot go on says so to its process, which stops (and a supervisor
starts it again) rather than sit on triggers it cannot run."""

from __future__ import annotations

from pathlib import Path

from tailrace.db import create_engine
from tailrace.triggerer import Triggerer


def test_a_triggerer_that_cannot_start_tells_its_process_and_does_not_keep_it_waiting(
    tmp_path: Path,
) -> None:
    # A database nobody migrated: the triggerer cannot even register itself.
    engine = create_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    reasons: list[str] = []
    triggerer = Triggerer(engine, log_folder=str(tmp_path / "logs"))
    triggerer.on_fatal = reasons.append
    try:
        thread = triggerer.run_in_thread()
        thread.join(timeout=30)
        assert not thread.is_alive()
    finally:
        engine.dispose()
    assert len(reasons) == 1
    assert reasons[0].startswith("the triggerer stopped: ")
    assert "job" in reasons[0]  # the table it could not find

"""The one clock: every component asks it for "now", and tests hand in their own.

Components take a ``clock`` argument defaulting to :func:`utcnow`, which reads the clock
installed for the process: the system's, or one a test installs with :func:`installed`
(the time-skipping harness's virtual clock). Task code, sensors and triggers ask the same
clock (kept in ``tailrace.sdk._clock``, as the SDK imports nothing of the core), so a
virtual clock moves everything together without patching anything.
"""

from tailrace.sdk._clock import Clock, Sleeper, installed, sleep, system_now, utcnow

__all__ = ["Clock", "Sleeper", "installed", "sleep", "system_now", "utcnow"]

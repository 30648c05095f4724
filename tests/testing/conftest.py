"""The harness's own pytest fixture, as a user's conftest.py would load it."""

from tailrace.testing.pytest_plugin import time_skipping

__all__ = ["time_skipping"]

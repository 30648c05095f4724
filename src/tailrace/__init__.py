"""Tailrace: a Python workflow orchestrator in which waiting is free and results stream.

The top-level package re-exports the authoring SDK (:mod:`tailrace.sdk`), so DAG files
write ``from tailrace import DAG, task``. It imports nothing of the core.
"""

from tailrace.sdk import *  # noqa: F403
from tailrace.sdk import __all__ as __all__

__version__ = "0.1.0"

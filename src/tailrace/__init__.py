"""Tailrace: a Python workflow orchestrator in which waiting is free and results stream.

The top-level package re-exports the authoring SDK (:mod:`tailrace.sdk`), so DAG files
write ``from tailrace import DAG, task``. It imports nothing of the core, and the SDK
only when one of its names is first used: ``tailrace --help`` needs neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from tailrace.sdk import *  # noqa: F403
    from tailrace.sdk import __all__ as __all__


_HERE = Path(__file__).parent


def __getattr__(name: str) -> Any:
    # PEP 562: called for names not set here, `__all__` included (for `import *`), and by
    # `from tailrace import actions` before it imports the submodule: that must not cost
    # the SDK.
    if (_HERE / f"{name}.py").is_file() or (_HERE / name / "__init__.py").is_file():
        raise AttributeError(name)
    import tailrace.sdk as sdk

    if name == "__all__":
        return sdk.__all__
    if name in sdk.__all__:
        return getattr(sdk, name)
    from tailrace.sdk._callbacks import REFUSED_NAMES, refused_name

    if name in REFUSED_NAMES:
        refused_name(name)
    raise AttributeError(f"module 'tailrace' has no attribute {name!r}")


def __dir__() -> list[str]:
    import tailrace.sdk as sdk

    return sorted({*globals(), *sdk.__all__})

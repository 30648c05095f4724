"""The authoring SDK must import without the core (database, scheduler, web)."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = [
    "sqlalchemy",
    "alembic",
    "fastapi",
    "starlette",
    "tailrace.db",
    "tailrace.scheduler",
    "tailrace.executors",
    "tailrace.cli",
    "tailrace.config",
]


def test_sdk_imports_no_core_modules() -> None:
    code = (
        "import json, sys\n"
        "import tailrace, tailrace.sdk, tailrace.sdk.execution, tailrace.sdk.operators\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = set(json.loads(out))
    leaked = [m for m in loaded for f in FORBIDDEN if m == f or m.startswith(f + ".")]
    assert leaked == []
    assert "tailrace.sdk" in loaded


def test_sdk_modules_import_nothing_of_tailrace_outside_the_sdk() -> None:
    import ast
    from pathlib import Path

    import tailrace.sdk

    root = Path(tailrace.sdk.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.startswith("tailrace") and not name.startswith("tailrace.sdk"):
                    offenders.append(f"{path.name}: {name}")
                if name.split(".")[0] in {"sqlalchemy", "alembic", "fastapi", "starlette"}:
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []

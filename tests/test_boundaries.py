"""Process boundaries from DESIGN.md, enforced: who may import what."""

from __future__ import annotations

import subprocess
import sys


def imported_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_workers_import_no_database_code() -> None:
    # A worker runs user code and talks to its owner over a pipe: no credentials, no ORM.
    modules = imported_after(
        "from tailrace.execution._worker import worker_main\nimport tailrace.sdk.execution"
    )
    assert not {m for m in modules if m.split(".")[0] in ("sqlalchemy", "alembic", "psycopg")}
    assert "tailrace.db" not in modules
    assert "tailrace.scheduler" not in modules

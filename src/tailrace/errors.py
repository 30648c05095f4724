"""Errors of Tailrace's core (database, scheduler, CLI). The root lives in the SDK."""

from __future__ import annotations

from tailrace.sdk.errors import TailraceError

__all__ = [
    "BackfillCompletedError",
    "BackfillError",
    "BackfillNotFoundError",
    "BackfillRunningError",
    "ConfValidationError",
    "ConnectionExistsError",
    "DagImportError",
    "DagNotFoundError",
    "InvalidConnectionUriError",
    "InvalidRoleError",
    "RunExistsError",
    "RunNotFoundError",
    "TailraceError",
    "UserExistsError",
]


class DagNotFoundError(TailraceError):
    def __init__(self, dag_id: str) -> None:
        self.dag_id = dag_id
        super().__init__(
            f"DAG {dag_id!r} is not known; check `tailrace dags list` and "
            "`tailrace dags list-import-errors`, and that --dags-folder points at its file"
        )


class DagImportError(TailraceError):
    """The DAG is not known because the file defining it fails to import."""

    def __init__(self, dag_id: str, filename: str, line: int | None, problem: str) -> None:
        self.dag_id = dag_id
        self.filename = filename
        self.line = line
        self.problem = problem
        where = f"{filename}, line {line}" if line and f"line {line}" not in problem else filename
        super().__init__(
            f"DAG {dag_id!r} failed to import: {where}: {problem}",
            hint="Fix the file and try again (`tailrace dags list-import-errors` lists "
            "every file that fails).",
        )


class RunExistsError(TailraceError):
    def __init__(self, dag_id: str, run_id: str) -> None:
        self.dag_id = dag_id
        self.run_id = run_id
        super().__init__(f"DAG {dag_id!r} already has a run {run_id!r}; choose another run id")


class ConfValidationError(TailraceError):
    def __init__(self, dag_id: str, param: str | None, problem: str) -> None:
        self.dag_id = dag_id
        self.param = param
        where = f"param {param!r} of DAG {dag_id!r}" if param else f"conf for DAG {dag_id!r}"
        super().__init__(f"{where}: {problem}")


class ConfTooLargeError(TailraceError):
    def __init__(self, dag_id: str, size: int, limit: int) -> None:
        self.dag_id = dag_id
        self.size = size
        self.limit = limit
        super().__init__(
            f"conf for DAG {dag_id!r} takes {size:,} bytes as JSON, over the limit of "
            f"{limit:,} (max_payload_bytes); pass a reference (a path, a URL, a key) "
            "instead of the data"
        )


class RunNotFoundError(TailraceError):
    def __init__(self, dag_id: str, run_id: str | None) -> None:
        self.dag_id = dag_id
        self.run_id = run_id
        what = f"no run {run_id!r}" if run_id else "no runs"
        super().__init__(f"DAG {dag_id!r} has {what}; see `tailrace dags list`")


class UserExistsError(TailraceError):
    def __init__(self, username: str) -> None:
        self.username = username
        super().__init__(f"a user {username!r} already exists; pick another username")


class InvalidRoleError(TailraceError):
    def __init__(self, role: str) -> None:
        self.role = role
        super().__init__(f"role must be 'admin' or 'viewer', not {role!r}")


class ConnectionExistsError(TailraceError):
    def __init__(self, conn_id: str) -> None:
        self.conn_id = conn_id
        super().__init__(
            f"connection {conn_id!r} already exists; delete it first to replace it "
            "(or `tailrace connections add --replace`)"
        )


class InvalidConnectionUriError(TailraceError):
    def __init__(self, conn_id: str, problem: str) -> None:
        self.conn_id = conn_id
        self.problem = problem
        super().__init__(f"{problem}; write it as scheme://login:password@host:port/schema?extra")


class ReplayError(TailraceError):
    """A replay that cannot be made (``tailrace streams replay``): what is missing, and
    what to do."""


class AssetNotFoundError(TailraceError):
    def __init__(self, asset: str) -> None:
        super().__init__(
            f"No asset is named (or has the URI) {asset!r}",
            hint="See `tailrace assets list`; an asset exists once a parsed DAG names it.",
        )


class AssetEventTooLargeError(TailraceError):
    def __init__(self, asset: str, size: int, limit: int) -> None:
        super().__init__(
            f"The extra of the event for asset {asset!r} is {size:,} bytes as JSON, over "
            f"the limit of {limit:,} bytes",
            hint="Store large data elsewhere and put a reference in extra, or raise "
            "TAILRACE_MAX_PAYLOAD_BYTES.",
        )


class BackfillError(TailraceError):
    """A backfill that cannot be created as asked (Airflow's InvalidBackfillDate,
    InvalidBackfillDirection, InvalidReprocessBehavior, DagNonPeriodicScheduleException):
    what is wrong, and what to do."""


class BackfillRunningError(TailraceError):
    """The DAG has a backfill that is not complete (Airflow's AlreadyRunningBackfill)."""

    def __init__(self, dag_id: str, backfill_id: int) -> None:
        self.dag_id = dag_id
        self.backfill_id = backfill_id
        super().__init__(
            f"There is already a running backfill ({backfill_id}) for DAG {dag_id!r}; "
            "there can be one at a time.",
            hint=f"Wait for it to finish, or cancel it (`tailrace backfill cancel {backfill_id}`).",
        )


class BackfillNotFoundError(TailraceError):
    def __init__(self, backfill_id: int) -> None:
        self.backfill_id = backfill_id
        super().__init__(
            f"No backfill has id {backfill_id}.",
            hint="See `tailrace backfill list --dag-id DAG_ID`.",
        )


class BackfillCompletedError(TailraceError):
    def __init__(self, backfill_id: int) -> None:
        self.backfill_id = backfill_id
        super().__init__(f"Backfill {backfill_id} is already completed")

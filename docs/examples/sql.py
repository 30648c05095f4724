"""The SQL provider: a query in one transaction, and a sensor polling from the triggerer."""

import os
import tempfile
from datetime import datetime
from pathlib import Path

from tailrace import DAG
from tailrace.providers.sql import SQLExecuteQueryOperator, SqlSensorAsync

# A scratch SQLite database, named as `tailrace connections add local_db --uri ...` would.
SCRATCH = Path(tempfile.gettempdir()) / "tailrace_docs_sql.db"
os.environ.setdefault("TAILRACE_CONN_LOCAL_DB", f"sqlite:///{SCRATCH}")

with DAG("sql", schedule=None, start_date=datetime(2026, 1, 1), tags=["docs"]) as sql:
    create = SQLExecuteQueryOperator(
        task_id="create", conn_id="local_db",
        sql=["CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, customer TEXT, amount NUMERIC)",
             "SELECT COUNT(*) AS n FROM orders WHERE amount > :floor"],
        parameters={"floor": 10},
    )   # one transaction; returns the last statement's rows as dicts: [{"n": 0}]

    export = SQLExecuteQueryOperator(
        task_id="export", conn_id="local_db",
        sql=["CREATE TABLE IF NOT EXISTS exports (day TEXT PRIMARY KEY, done INTEGER)",
             "INSERT OR REPLACE INTO exports VALUES ('{{ ds }}', 1)"],
    )

    done = SqlSensorAsync(task_id="export_done", conn_id="local_db",
                          sql="SELECT done FROM exports WHERE day = '{{ ds }}'", poke_interval=30)

    create >> export >> done

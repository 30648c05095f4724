"""The SQL provider: a query in one transaction, and a sensor waiting for a row.

The connection `local_db` is a scratch SQLite file in Tailrace's home, named in the
environment of every process that imports this file (the workers do). Name your own with
`tailrace connections add ID --uri URI` or `TAILRACE_CONN_<ID>`; a deferrable sensor
(`SqlSensorAsync`) looks its connection up in the triggerer, so it needs one of those.
"""

import os
from datetime import datetime
from pathlib import Path

from tailrace import DAG
from tailrace.providers.sql import SQLExecuteQueryOperator, SqlSensor

HOME = Path(os.environ.get("TAILRACE_HOME") or Path.home() / ".tailrace").expanduser()
os.environ.setdefault("TAILRACE_CONN_LOCAL_DB", f"sqlite:///{HOME / 'docs_sql.db'}")

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

    done = SqlSensor(task_id="export_done", conn_id="local_db",
                     sql="SELECT done FROM exports WHERE day = '{{ ds }}'", poke_interval=30)

    create >> export >> done

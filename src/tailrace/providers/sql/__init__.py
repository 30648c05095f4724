"""SQL on SQLAlchemy (PostgreSQL, SQLite, MySQL/MariaDB): a hook, a query operator, a
batch upsert operator and a sensor.

A connection is a database URL: ``postgresql://user:password@host/db``,
``sqlite:////path/to.db``, ``mysql://user:password@host/db`` (``tailrace[mysql]``).
"""

from tailrace.providers.errors import RowError
from tailrace.providers.sql._hook import SqlHook, jsonable, sqlalchemy_url, upsert
from tailrace.providers.sql._operators import SQLExecuteQueryOperator, SQLInsertRowsOperator
from tailrace.providers.sql._sensors import SqlSensor, SqlSensorAsync, SqlSensorTrigger

__all__ = [  # noqa: RUF022 - grouped by concept
    "SqlHook",
    "jsonable",
    "sqlalchemy_url",
    "upsert",
    # operators and sensors
    "SQLExecuteQueryOperator",
    "SQLInsertRowsOperator",
    "SqlSensor",
    "SqlSensorAsync",
    "SqlSensorTrigger",
    # errors
    "RowError",
]

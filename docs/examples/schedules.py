"""Scheduled DAGs: cron, presets, timedelta and @once."""

from datetime import datetime, timedelta

from tailrace import DAG
from tailrace.sdk.operators.bash import BashOperator

START = datetime(2026, 1, 1)

with DAG("every_morning", schedule="30 6 * * 1-5", start_date=START) as every_morning:
    BashOperator(task_id="report", bash_command="echo report for {{ ds }}")

with DAG("hourly", schedule="@hourly", start_date=START, max_active_runs=1) as hourly:
    BashOperator(task_id="sync", bash_command="echo {{ logical_date }}")

with DAG("every_15_min", schedule=timedelta(minutes=15), start_date=START) as every_15_min:
    BashOperator(task_id="poll", bash_command="echo polling")

with DAG(
    "backfilled_daily",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    end_date=datetime(2026, 1, 31),
    catchup=True,  # one run per day of January, oldest first
    max_active_runs=3,
) as backfilled_daily:
    BashOperator(task_id="load", bash_command="echo loading {{ ds }}")

with DAG("setup_once", schedule="@once", start_date=START) as setup_once:
    BashOperator(task_id="init", bash_command="echo initialising")

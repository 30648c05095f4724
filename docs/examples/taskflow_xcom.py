"""XCom: return values, multiple_outputs, explicit push/pull and the task context."""

from datetime import datetime

from tailrace import dag, get_current_context, task
from tailrace.sdk.operators.python import PythonOperator


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["docs"])
def taskflow_xcom():
    @task(multiple_outputs=True)
    def stats() -> dict[str, int]:
        return {"rows": 120, "bad_rows": 3}  # also pushed as XComs "rows" and "bad_rows"

    @task
    def ratio(rows: int, bad_rows: int) -> float:
        return bad_rows / rows

    @task
    def push_extra(ti=None) -> None:
        ti.xcom_push(key="source", value="s3://bucket/2026-01-01/")

    def report(ti) -> str:
        source = ti.xcom_pull(task_ids="push_extra", key="source")
        bad = ti.xcom_pull(task_ids="ratio")
        return f"{source}: {bad:.1%} bad rows"

    @task
    def whoami() -> str:
        context = get_current_context()
        return f"{context['ti'].task_id} in run {context['run_id']}"

    s = stats()
    r = ratio(s["rows"], s["bad_rows"])
    summary = PythonOperator(task_id="report", python_callable=report)
    [r, push_extra()] >> summary
    whoami()


taskflow_xcom()

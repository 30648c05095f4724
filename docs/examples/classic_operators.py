"""Operators, the `with DAG(...)` style, dependencies and trigger rules."""

from datetime import datetime

from tailrace import DAG, chain
from tailrace.sdk.operators.bash import BashOperator
from tailrace.sdk.operators.empty import EmptyOperator
from tailrace.sdk.operators.python import PythonOperator


def greet(name: str, ds: str) -> str:
    # Parameters named like context keys (ds, ti, params, ...) are filled in.
    print(f"hello {name}, today is {ds}")
    return name.upper()


with DAG(
    "classic_operators",
    schedule="0 6 * * *",
    start_date=datetime(2026, 1, 1),
    default_args={"retries": 2},
    tags=["docs"],
) as classic_operators:
    start = EmptyOperator(task_id="start")
    hello = PythonOperator(task_id="hello", python_callable=greet, op_kwargs={"name": "ada"})
    shout = BashOperator(
        task_id="shout",
        bash_command="echo 'got {{ ti.xcom_pull(task_ids=\"hello\") }}'",
    )
    audit = BashOperator(task_id="audit", bash_command="echo auditing {{ ds }}")
    done = EmptyOperator(task_id="done", trigger_rule="all_done")

    start >> hello >> shout      # hello after start, shout after hello
    [shout, audit] >> done       # lists on either side
    chain(start, audit)          # same as start >> audit; chain(a, [b, c], d), pairwise lists

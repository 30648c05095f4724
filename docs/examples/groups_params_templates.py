"""Task groups, params validated by JSON Schema, and Jinja templating."""

from datetime import datetime

from tailrace import DAG, Param, TaskGroup, task, task_group
from tailrace.sdk.operators.bash import BashOperator
from tailrace.sdk.operators.empty import EmptyOperator

with DAG(
    "groups_params_templates",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    params={
        "table": Param("orders", type="string", pattern="^[a-z_]+$"),
        "limit": Param(100, type="integer", minimum=1, maximum=10_000),
    },
    user_defined_macros={"warehouse": "analytics"},
    tags=["docs"],
) as groups_params_templates:
    with TaskGroup("extract", default_args={"retries": 1}) as extract:
        # task ids become "extract.orders" and "extract.customers"
        orders = BashOperator(
            task_id="orders",
            bash_command="echo 'SELECT * FROM {{ warehouse }}.{{ params.table }} "
            "LIMIT {{ params.limit }} -- {{ ds }}'",
        )
        customers = EmptyOperator(task_id="customers")

    @task_group
    def publish():
        @task
        def render(params=None) -> str:
            return f"{params['table']} x{params['limit']}"

        @task
        def announce(text: str, run_id=None) -> None:
            print(f"published {text} in {run_id}")

        announce(render())

    @task
    def next_week(ds=None, macros=None) -> str:
        return macros.ds_add(ds, 7)

    extract >> publish() >> next_week()

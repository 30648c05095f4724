"""A custom operator with a templated field, mapped with readable instance names."""

from datetime import datetime

from tailrace import DAG, BaseOperator


class Greet(BaseOperator):
    template_fields = ("who",)

    def __init__(self, *, who: str, **kwargs):
        super().__init__(**kwargs)
        self.who = who

    def execute(self, context):
        return f"hello {self.who}"


with DAG(
    "custom_operator",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    params={"name": "ada"},
    tags=["docs"],
) as custom_operator:
    one = Greet(task_id="greet", who="{{ params.name }}")
    many = Greet.partial(task_id="greet_many", map_index_template="{{ task.who }}").expand(
        who=["grace", "edsger"],
    )
    one >> many

"""The initial schema.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 02:36:06.506642
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "connection",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conn_id", sa.String(length=250), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_connection")),
        sa.UniqueConstraint("conn_id", name=op.f("uq_connection_conn_id")),
    )
    op.create_table(
        "dag",
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("fileloc", sa.Text(), nullable=False),
        sa.Column("is_paused", sa.Boolean(), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("latest_version_id", sa.Integer(), nullable=True),
        sa.Column("schedule_description", sa.String(length=250), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("max_active_runs", sa.Integer(), nullable=False),
        sa.Column("next_dagrun", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_dagrun_interval_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_parsed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("dag_id", name=op.f("pk_dag")),
    )
    op.create_table(
        "import_error",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("filename", sa.Text(), nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=True),
        sa.Column("task_id", sa.String(length=250), nullable=True),
        sa.Column("line", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("stacktrace", sa.Text(), nullable=False),
        sa.Column("timestamp", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_import_error")),
        sa.UniqueConstraint("filename", name=op.f("uq_import_error_filename")),
    )
    op.create_table(
        "job",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_type", sa.String(length=30), nullable=False),
        sa.Column("hostname", sa.String(length=250), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("start_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("latest_heartbeat", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job")),
    )
    op.create_table(
        "trigger",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("classpath", sa.String(length=1000), nullable=False),
        sa.Column("kwargs", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("trigger_run_id", sa.String(length=64), nullable=True),
        sa.Column("triggerer_job_id", sa.Integer(), nullable=True),
        sa.Column("lease_epoch", sa.Integer(), nullable=False),
        sa.Column("consumer", sa.String(length=20), nullable=False),
        sa.Column("timeout_outcome", sa.String(length=20), nullable=False),
        sa.Column("max_pending_events", sa.Integer(), nullable=True),
        sa.Column("checkpoint", sa.JSON(), nullable=True),
        sa.Column("next_sequence", sa.BigInteger(), nullable=False),
        sa.Column("acked_sequence", sa.BigInteger(), nullable=False),
        sa.Column("completed", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["triggerer_job_id"],
            ["job.id"],
            name=op.f("fk_trigger_triggerer_job_id_job"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trigger")),
    )
    op.create_index(
        op.f("ix_trigger_triggerer_job_id"), "trigger", ["triggerer_job_id"], unique=False
    )
    op.create_table(
        "user",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("username", sa.String(length=250), nullable=False),
        sa.Column("password_hash", sa.String(length=512), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_user")),
        sa.UniqueConstraint("username", name=op.f("uq_user_username")),
    )
    op.create_table(
        "api_token",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["user.id"], name=op.f("fk_api_token_user_id_user"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_token")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_token_token_hash")),
    )
    op.create_table(
        "dag_version",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("version_number", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("fileloc", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dag_id"], ["dag.dag_id"], name=op.f("fk_dag_version_dag_id_dag"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dag_version")),
        sa.UniqueConstraint(
            "dag_id", "version_number", name=op.f("uq_dag_version_dag_id_version_number")
        ),
    )
    op.create_table(
        "trigger_event",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("trigger_id", sa.Integer(), nullable=False),
        sa.Column("trigger_run_id", sa.String(length=64), nullable=False),
        sa.Column("sequence_index", sa.BigInteger(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("is_last", sa.Boolean(), nullable=False),
        sa.Column("checkpoint", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["trigger_id"],
            ["trigger.id"],
            name=op.f("fk_trigger_event_trigger_id_trigger"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trigger_event")),
        sa.UniqueConstraint(
            "trigger_id", "sequence_index", name=op.f("uq_trigger_event_trigger_id_sequence_index")
        ),
    )
    op.create_table(
        "dag_run",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("dag_version_id", sa.Integer(), nullable=False),
        sa.Column("run_type", sa.String(length=20), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("logical_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("data_interval_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("data_interval_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("conf", sa.JSON(), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("start_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dag_id"], ["dag.dag_id"], name=op.f("fk_dag_run_dag_id_dag"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["dag_version_id"],
            ["dag_version.id"],
            name=op.f("fk_dag_run_dag_version_id_dag_version"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dag_run")),
        sa.UniqueConstraint("dag_id", "run_id", name=op.f("uq_dag_run_dag_id_run_id")),
    )
    op.create_index("ix_dag_run_state_dag_id", "dag_run", ["state", "dag_id"], unique=False)
    op.create_table(
        "task_instance",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_run_id", sa.Integer(), nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("task_id", sa.String(length=250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=True),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("max_tries", sa.Integer(), nullable=False),
        sa.Column("operator", sa.String(length=250), nullable=False),
        sa.Column("queue", sa.String(length=250), nullable=False),
        sa.Column("rendered_map_index", sa.String(length=250), nullable=True),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("start_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("duration", sa.Float(), nullable=True),
        sa.Column("next_retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("hostname", sa.String(length=250), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("queued_by_job_id", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("next_method", sa.String(length=250), nullable=True),
        sa.Column("next_kwargs", sa.JSON(), nullable=True),
        sa.Column("trigger_id", sa.Integer(), nullable=True),
        sa.Column("trigger_timeout", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_run_id"],
            ["dag_run.id"],
            name=op.f("fk_task_instance_dag_run_id_dag_run"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["trigger_id"],
            ["trigger.id"],
            name=op.f("fk_task_instance_trigger_id_trigger"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["queued_by_job_id"],
            ["job.id"],
            name=op.f("fk_task_instance_queued_by_job_id_job"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_instance")),
        sa.UniqueConstraint(
            "dag_run_id",
            "task_id",
            "map_index",
            name=op.f("uq_task_instance_dag_run_id_task_id_map_index"),
        ),
    )
    op.create_index(
        "ix_task_instance_dag_id_run_id", "task_instance", ["dag_id", "run_id"], unique=False
    )
    op.create_index("ix_task_instance_state", "task_instance", ["state"], unique=False)
    op.create_index(
        op.f("ix_task_instance_trigger_id"), "task_instance", ["trigger_id"], unique=False
    )
    op.create_table(
        "xcom",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_run_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(length=250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dag_run_id"],
            ["dag_run.id"],
            name=op.f("fk_xcom_dag_run_id_dag_run"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_xcom")),
        sa.UniqueConstraint(
            "dag_run_id",
            "task_id",
            "map_index",
            "key",
            name=op.f("uq_xcom_dag_run_id_task_id_map_index_key"),
        ),
    )
    op.create_table(
        "stream",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_instance_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("closed", sa.Boolean(), nullable=False),
        sa.Column("length", sa.BigInteger(), nullable=False),
        sa.Column("acknowledged", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_instance_id"],
            ["task_instance.id"],
            name=op.f("fk_stream_task_instance_id_task_instance"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stream")),
        sa.UniqueConstraint("task_instance_id", "key", name=op.f("uq_stream_task_instance_id_key")),
    )
    op.create_table(
        "task_instance_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_instance_id", sa.Integer(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("start_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("duration", sa.Float(), nullable=True),
        sa.Column("hostname", sa.String(length=250), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_instance_id"],
            ["task_instance.id"],
            name=op.f("fk_task_instance_history_task_instance_id_task_instance"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_instance_history")),
        sa.UniqueConstraint(
            "task_instance_id",
            "try_number",
            name=op.f("uq_task_instance_history_task_instance_id_try_number"),
        ),
    )
    op.create_table(
        "stream_item",
        sa.Column("stream_id", sa.Integer(), nullable=False),
        sa.Column("index", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["stream_id"],
            ["stream.id"],
            name=op.f("fk_stream_item_stream_id_stream"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("stream_id", "index", name=op.f("pk_stream_item")),
    )


def downgrade() -> None:
    op.drop_table("stream_item")
    op.drop_table("task_instance_history")
    op.drop_table("stream")
    op.drop_table("xcom")
    op.drop_index(op.f("ix_task_instance_trigger_id"), table_name="task_instance")
    op.drop_index("ix_task_instance_state", table_name="task_instance")
    op.drop_index("ix_task_instance_dag_id_run_id", table_name="task_instance")
    op.drop_table("task_instance")
    op.drop_index("ix_dag_run_state_dag_id", table_name="dag_run")
    op.drop_table("dag_run")
    op.drop_table("trigger_event")
    op.drop_table("dag_version")
    op.drop_table("api_token")
    op.drop_table("user")
    op.drop_index(op.f("ix_trigger_triggerer_job_id"), table_name="trigger")
    op.drop_table("trigger")
    op.drop_table("job")
    op.drop_table("import_error")
    op.drop_table("dag")
    op.drop_table("connection")

"""The store: SQL for a group of tables, one module each, behind plain functions.

Task instances have theirs in `tailrace.transitions` (the state machine writes them);
the others move here as they are touched (issue 13): `triggers` first.
"""

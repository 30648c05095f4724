"""Providers: hooks, operators, sensors and triggers for systems outside Tailrace.

``tailrace.providers.http`` (on httpx) and ``tailrace.providers.sql`` (on SQLAlchemy).
Hooks find their credentials through named connections (:mod:`tailrace.sdk.connections`).
"""

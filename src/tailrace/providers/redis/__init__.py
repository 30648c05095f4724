"""Redis Streams: a streaming trigger that reads a stream through a consumer group and
acknowledges each entry only once what it produced is durable.

A connection is a Redis URL: ``redis://[:password@]host:port/db`` (``rediss://`` for TLS).
"""

from tailrace.providers.redis._streams import DEAD_LETTER_SUFFIX, RedisStreamTrigger

__all__ = ["DEAD_LETTER_SUFFIX", "RedisStreamTrigger"]

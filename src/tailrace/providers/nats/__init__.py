"""NATS JetStream: a streaming trigger that reads a stream through a durable pull
consumer, acknowledging each message only once what it produced is durable.

A connection is a NATS URL: ``nats://[user:password@]host:4222`` (``tls://`` for TLS).
"""

from tailrace.providers.nats._jetstream import DEAD_LETTER_SUFFIX, NatsJetStreamTrigger

__all__ = ["DEAD_LETTER_SUFFIX", "NatsJetStreamTrigger"]

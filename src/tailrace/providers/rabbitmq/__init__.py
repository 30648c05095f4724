"""RabbitMQ: a streaming trigger that consumes a durable queue with manual acknowledgement,
acknowledging each message only once what it produced is durable.

A connection is an AMQP URL: ``amqp://user:password@host:5672/vhost``.
"""

from tailrace.providers.rabbitmq._queues import DEAD_LETTER_SUFFIX, RabbitMQQueueTrigger

__all__ = ["DEAD_LETTER_SUFFIX", "RabbitMQQueueTrigger"]

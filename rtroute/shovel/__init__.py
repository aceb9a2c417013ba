"""The shovel: moves messages between brokers as RabbitMQ's shovel plugin does, from outside."""

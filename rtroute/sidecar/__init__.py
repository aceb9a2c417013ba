"""The sidecar: managed exchanges served from outside RabbitMQ (see DESIGN.md's broker layout)."""

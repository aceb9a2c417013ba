"""``rtroute proxy``: an AMQP 0-9-1 proxy that gives any client the x-rtopic plugin's behaviour."""

"""``fmdoctor serve``: investigations that start when an alarm fires or a cluster emits an event.

Modules: ``events`` (the documented event shapes, parsed into one ``Event``), ``routing`` (event -> cluster and
checks), ``investigate`` (the scoped ``Doctor`` run, the likeliest cause, the narrative), ``outputs`` (Slack
thread, JSON webhook, SNS), ``state`` (idempotency ledger, metrics), ``processor`` (one message, one outcome),
``queue`` (the SQS consumer), ``http`` (webhooks, /metrics, /healthz), ``service`` (wiring, SIGTERM).
"""

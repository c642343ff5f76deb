"""The embedded demo: moto in-process, seeded with a realistic broken training cluster."""

# Here, not only in scenario: a front end can name the demo cluster before importing what seeds it.
DEMO_CLUSTER = "demo-llm-train"

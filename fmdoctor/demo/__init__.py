"""The embedded demo: moto in-process, seeded with a realistic broken training cluster."""

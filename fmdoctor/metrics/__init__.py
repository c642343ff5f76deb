"""Metrics at cluster scale: CloudWatch discovery and batched fetches, robust statistics, per-node views."""

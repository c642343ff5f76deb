"""Exporters: fmdoctor's verdicts into monitoring systems (CloudWatch metrics; Prometheus is a report format)."""

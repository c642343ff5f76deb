"""A training job's own words about a hang: its log lines, NCCL flight-recorder dumps, and which rank is on which host.

Pure parsing and judging over plain data; reading CloudWatch Logs and S3 is in :mod:`fmdoctor.training.logs`
and :mod:`fmdoctor.training.flight_recorder`, which the ``training-stalled`` check calls with the run's clients.
"""

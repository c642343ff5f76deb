"""Spot interruption and rebalance notices: EC2 Spot request status, EventBridge events in SQS, and IMDS."""

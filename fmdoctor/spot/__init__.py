"""Notices that EC2 is taking nodes away: Spot and interruptible-reservation interruptions, rebalance
recommendations, scheduled events, Capacity Blocks ending; from EC2, SQS (EventBridge) and IMDS."""

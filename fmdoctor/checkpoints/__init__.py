"""Checkpoint locations (S3, FSx for Lustre via its S3 export, local paths) and what their newest checkpoint says."""

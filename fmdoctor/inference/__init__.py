"""Inference-side logic the inference checks share: metrics fetched once per run, judgements over them,
scaling limits. SageMaker endpoint discovery itself is part of the inventory (fmdoctor.engine.endpoints).
"""

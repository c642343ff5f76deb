"""The assistant's evaluation set: questions over seeded clusters, with the tools that must be called and the
finding ids the answer must cite (``cases.yaml``, ``scenarios.py``). Run it with ``fmdoctor eval``; the
harness is :mod:`fmdoctor.assistant.evaluation`.
"""

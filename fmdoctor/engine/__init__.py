"""The check engine: findings, the check contract, the AWS session wrapper, inventory and the runner.

Front ends (CLI, agent tools, TUI, Slack, MCP) all go through :mod:`fmdoctor.engine.api`.
"""

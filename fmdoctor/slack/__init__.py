"""Slack front end (slack-bolt): ``/fmdoctor`` commands, @mentions, Runbook/Fix buttons, watch mode.

Modules: ``tokens`` (credentials from the environment, log redaction), ``commands`` (slash command parsing),
``blocks`` (Block Kit rendering within Slack's limits), ``auth`` (channel -> cluster allow-list, fix
approvers), ``dedupe`` (each event once), ``service`` (checks, why-not, questions, posting), ``fixes``
(confirm dialog, approval, apply), ``app`` (bolt wiring), ``server`` (HTTP mode with /healthz), ``watch``,
``testing`` (a loopback fake of the Web API and request signing, for tests and trials).
Everything it answers comes from the engine, the assistant and the remediation library, like the CLI.
"""

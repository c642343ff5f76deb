"""``fmdoctor mcp``: fmdoctor's tools for any Model Context Protocol client, over stdio or streamable HTTP.

:mod:`fmdoctor.mcp.service` holds what the tools do (engine, runbooks, remediation; no SDK);
:mod:`fmdoctor.mcp.server` exposes it with the official MCP Python SDK; :mod:`fmdoctor.mcp.http` serves it
over streamable HTTP behind a bearer token. Imported only by ``fmdoctor mcp``: the SDK is the ``mcp`` extra.
Inside this package the SDK is always imported absolutely (``mcp.server...``), never relative.
"""

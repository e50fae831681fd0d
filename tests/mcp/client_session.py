"""An MCP client session with the official Python SDK (`mcp`) against corecast's /mcp.

Usage: client_session.py URL. Prints one JSON report line; exits non-zero on any surprise.
Run by tests/mcp.rs (`the_official_python_client_runs_a_session`).
"""
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError


def body(result):
    """The pull API body a tool result carries (text content, also structuredContent)."""
    text = result.content[0].text
    parsed = json.loads(text)
    if result.structuredContent is not None:
        assert result.structuredContent == parsed, (result.structuredContent, parsed)
    return parsed


async def main(url):
    report = {}
    async with streamablehttp_client(url) as (read, write, get_session_id):
        async with ClientSession(read, write) as s:
            init = await s.initialize()
            report["protocol"] = init.protocolVersion
            report["server"] = init.serverInfo.name
            report["session"] = bool(get_session_id())
            tools = await s.list_tools()
            report["tools"] = [t.name for t in tools.tools]
            cat = await s.call_tool("stream_catalog", {})
            report["catalog"] = [e["name"] for e in body(cat)["streams"]]
            peek = await s.call_tool("stream_peek", {"stream": "t", "limit": 2})
            report["peek"] = [r[0] for r in body(peek)["rows"]]
            w = body(await s.call_tool("stream_collect", {"stream": "t", "limit": 2}))
            report["collect"] = [r[0] for r in w["rows"]]
            w2 = body(await s.call_tool("stream_collect", {"stream": "t", "cursor": w["next_cursor"]}))
            report["collect_next"] = [r[0] for r in w2["rows"]]
            sub = body(
                await s.call_tool(
                    "stream_subscribe", {"stream": "t", "cursor": w2["next_cursor"], "wait_s": 0.2}
                )
            )
            report["subscribe"] = {"count": sub["count"], "cursor": bool(sub["next_cursor"])}
            state = await s.call_tool("stream_state", {"stream": "t"})
            report["state"] = {"isError": state.isError, "text": state.content[0].text}
            try:
                await s.call_tool("stream_collect", {"stream": "t", "limit": 10000})
                report["unbounded"] = "accepted"
            except McpError as e:
                report["unbounded"] = {"code": e.error.code, "message": e.error.message}
    print(json.dumps(report))


asyncio.run(main(sys.argv[1]))

"""The unchanged official client against an authenticating corecast (tests/auth.rs).

argv: ADDR ALICE_PASSWORD BOB_TOKEN. bob publishes three rows with a bearer token (an extra
header, passed through to `websockets.connect`); alice reads them with `ws://alice:PW@host`
(the client sends the userinfo as HTTP Basic); a wrong password and alice publishing are
refused before the upgrade. Prints one JSON report line.
"""

import asyncio
import json
import sys
import time
from urllib.parse import quote

import streamcast


def status_of(exc):
    """The HTTP status of a refused upgrade, wherever the client keeps it."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        resp = getattr(exc, "response", None)
        code = getattr(resp, "status_code", None)
        if code is not None:
            return code
        exc = exc.__cause__ or exc.__context__
    return None


async def main():
    addr, password, token = sys.argv[1:4]
    report = {}
    symbol = f"OFF{int(time.time() * 1000) % 100000}"
    async with streamcast.publish(
        f"ws://{addr}/trades",
        additional_headers={"Authorization": f"Bearer {token}"},
    ) as producer:
        first = None
        for i in range(3):
            off = await producer.send(
                {
                    "event_ts": 1_700_000_000_000_000 + i,
                    "price": 100.5 + i,
                    "amount": 0.25,
                    "side": i % 2,
                    "symbol": symbol,
                    "trade_id": 900 + i,
                }
            )
            first = off if first is None else first
    report["first_offset"] = first
    userinfo = f"alice:{quote(password, safe='')}"
    rows = 0
    async with streamcast.connect(f"ws://{userinfo}@{addr}/trades", offset=first) as sub:
        async for _offset, _ts, row in sub:
            assert row["symbol"] == symbol, row
            rows += 1
            if rows == 3:
                break
    report["rows"] = rows
    try:
        async with streamcast.connect(f"ws://alice:wrong@{addr}/trades"):
            report["wrong_password_status"] = "connected"
    except Exception as e:  # noqa: BLE001 — the status is the point, whatever wraps it
        report["wrong_password_status"] = status_of(e)
        report["wrong_password_error"] = repr(e)[:200]
    try:
        async with streamcast.publish(f"ws://{userinfo}@{addr}/trades"):
            report["publish_denied_status"] = "connected"
    except Exception as e:  # noqa: BLE001
        report["publish_denied_status"] = status_of(e)
    print(json.dumps(report))


asyncio.run(main())

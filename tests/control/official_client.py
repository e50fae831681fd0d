"""The unchanged official client against a stream created over /control/v1 (tests/control.rs).

argv: ADDR STREAM MODE. MODE `serve`: publish three rows, read them back from the first offset;
MODE `retired`: publishing must raise StreamRetired (4410) with the close's fields, and reading
from offset 0 still serves the rows. Prints one JSON report line.
"""

import asyncio
import json
import sys

import streamcast


async def main():
    addr, stream, mode = sys.argv[1:4]
    url = f"ws://{addr}/{stream}"
    report = {"mode": mode}
    if mode == "serve":
        first = None
        async with streamcast.publish(url) as producer:
            for i in range(3):
                off = await producer.send({"i": i})
                first = off if first is None else first
        report["first_offset"] = first
        rows = []
        async with streamcast.connect(url, offset=first) as sub:
            async for offset, _ts, row in sub:
                rows.append([offset, row["i"]])
                if len(rows) == 3:
                    break
        report["rows"] = rows
    else:
        try:
            async with streamcast.publish(url) as producer:
                await producer.send({"i": 99})
            report["refused"] = None
        except streamcast.StreamRetired as e:
            report["refused"] = "StreamRetired"
            report["at"] = e.at
            report["end_offset"] = getattr(e, "end_offset", None)
        rows = 0
        async with streamcast.connect(url, offset=0) as sub:
            async for _offset, _ts, _row in sub:
                rows += 1
                if rows == 3:
                    break
        report["rows"] = rows
    print(json.dumps(report))


asyncio.run(main())

"""The unchanged official client's catch-up across a migration seam (tests/migration.rs).

argv: ADDR STREAM FROM END [MANIFEST]. Subscribes at offset FROM with catch_up=True, which is refused
(4416 evicted, the seam as earliest) when FROM is below the seam, reads the older log from the
published tables and resumes the socket at the seam; reads until offset END-1. Also checks that a
plain connect below the seam raises NotReplayable(evicted) with the seam. Prints one JSON report
line: the rows as [offset, i, note] and the refusal's fields, and with MANIFEST (a stream
manifest Parquet file) its rows as pyarrow reads them.
"""

import asyncio
import json
import sys

import streamcast


async def main():
    addr, stream, first, end = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    url = f"ws://{addr}/{stream}"
    report = {}
    try:
        async with streamcast.connect(url, offset=first) as sub:
            async for _ in sub:
                break
        report["plain"] = None
    except streamcast.NotReplayable as e:
        report["plain"] = {
            "why": e.why,
            "earliest": e.fields.get("earliest"),
        }
    rows = []
    async with streamcast.connect(url, offset=first, catch_up=True) as sub:
        async for offset, _ts, row in sub:
            rows.append([offset, row.get("i"), row.get("note")])
            if offset >= end - 1:
                break
    report["rows"] = rows
    if len(sys.argv) > 5:
        import pyarrow.parquet as pq

        report["manifest"] = pq.read_table(sys.argv[5]).to_pylist()
    print(json.dumps(report))


asyncio.run(asyncio.wait_for(main(), 120))

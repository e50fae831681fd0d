#!/usr/bin/env python
"""The unchanged official client (streamcast 0.26.0) against a running corecast, reading the
gap from corecast's published Iceberg table: run by tests/published.rs with the anchor venv's
python (../shared/tools/anchor/setup.sh), one step per invocation.

    check_catch_up.py STEP --url ws://HOST:PORT/STREAM [--first N] [--end N] [--live N]

Rows are the reference fixture's `row(i)` (deterministic, so every delivered row is checked).

Steps:
  publish    publish rows --first..--end-1 with the official publisher (offsets checked)
  wait       wait until /stats shows the table holding rows and a tail left unpublished;
             prints {"published_end": P, "floor": F, "end": E}
  catch_up   the full sequence on a table of rows F..P-1 with the server at E:
             plain connect from F refused too_old; catch_up from F, from the middle, from
             EARLIEST, with metadata=<plain copy>, with where=; live rows after the splice;
             Stream.snapshot counts; DuckDB iceberg_scan and pyiceberg types and values
  table      read the table in --data DIR (the stream's directory), or the one the stream
             metadata hint --hint URI names (file:// or s3://), with no server: whole,
             contiguous, right values; prints {"floor": F, "end": E, ...}
  below      catch_up from --first (below the table's floor after retention) is refused with
             CatchUpUnavailable naming the floor; EARLIEST takes what is left with no gap
Every check that fails raises; the last line printed is a JSON report.

On S3 (`s3://` metadata in the greeting) the client, pyiceberg and DuckDB take the endpoint and
keys from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.request
from pathlib import Path

ANCHOR = Path(__file__).resolve().parents[2].parent / "shared" / "tools" / "anchor"
sys.path.insert(0, str(ANCHOR))

import streamcast  # noqa: E402
from published_fixture import row  # noqa: E402


def stats(url: str) -> dict:
    http = url.replace("ws://", "http://").rsplit("/", 1)[0]
    name = url.rsplit("/", 1)[1]
    with urllib.request.urlopen(f"{http}/stats", timeout=10) as r:
        doc = json.load(r)
    return next(s for s in doc["streams"] if s["name"] == name)


async def publish(url: str, lo: int, hi: int) -> None:
    async with streamcast.publish(url) as producer:
        for start in range(lo, hi, 100):
            batch = [row(i) for i in range(start, min(hi, start + 100))]
            offsets = await producer.send_many(batch)
            assert offsets == list(range(start, min(hi, start + 100))), offsets


def wait(url: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        s = stats(url)
        p = s["tiers"]["published"]
        last = {"published_end": p["end_offset"], "floor": p["first_offset"],
                "end": s["end_offset"], "sealed_end": s["tiers"]["sealed"]["last_offset"]}
        # the table holds rows; every sealed row is published (the publisher caught up)
        sealed_last = s["tiers"]["sealed"]["last_offset"]
        if p["first_offset"] is not None and sealed_last is not None \
                and p["end_offset"] == sealed_last + 1:
            return last
        time.sleep(0.2)
    raise AssertionError(f"the table did not catch up with the sealed tier: {last}")


async def read_until(sub, last: int) -> list[int]:
    seen: list[int] = []
    while not seen or seen[-1] < last:
        offset, ts, message = await asyncio.wait_for(sub.recv(), 30)
        assert isinstance(ts, int), ts
        assert message == row(offset), (offset, message, row(offset))
        if seen:
            assert offset == seen[-1] + 1, f"gap or duplicate: {offset} after {seen[-1]}"
        seen.append(offset)
    return seen


async def catch_up(url: str, floor: int, published_end: int, end: int, live: int) -> dict:
    report: dict = {}
    # 1. the plain client is refused, with the fields the catch-up relies on
    try:
        async with streamcast.connect(url, offset=floor) as sub:
            raise AssertionError(f"expected a refusal, got {sub.info}")
    except streamcast.NotReplayable as refused:
        assert refused.why == "too_old", refused
        report["refusal"] = {"why": refused.why, "fields": refused.fields}

    # 2. catch_up from the floor: the table, then the socket from its end, then live rows
    async with streamcast.connect(url, offset=floor, catch_up=True) as sub:
        probe = {"metadata": sub.info.metadata, "stream_id": sub.info.stream_id}
        seen = await read_until(sub, end - 1)
        assert seen[0] == floor, seen[:3]
        resumed = sub.info.replay
        assert resumed is not None and resumed[0] == published_end, (resumed, published_end)
        await publish(url, end, end + live)
        more = []
        while not more or more[-1] < end + live - 1:
            offset, ts, message = await asyncio.wait_for(sub.recv(), 30)
            assert message == row(offset), (offset, message)
            assert offset == (more[-1] if more else seen[-1]) + 1, "gap or duplicate after the splice"
            more.append(offset)
        seen += more
    assert seen == list(range(floor, end + live)), "gap or duplicate"
    report["catch_up"] = {"rows": len(seen), "from_table": [floor, published_end - 1],
                          "replayed": [published_end, end - 1], "live": [end, end + live - 1],
                          "resumed_replay": list(resumed), "probe": probe}
    end += live

    async def caught(start: int, first: int, **kw) -> int:
        async with streamcast.connect(url, offset=start, catch_up=True, **kw) as sub:
            got = await read_until(sub, end - 1)
        assert got[0] == first and got == list(range(first, end)), (got[:3], got[-3:])
        return len(got)

    # 3. other entry points
    plain = probe["metadata"].replace(".metadata/version-hint.text", ".metadata.json")
    report["metadata_plain"] = await caught(floor, floor, metadata=plain)
    middle = (floor + published_end) // 2
    report["from_middle"] = await caught(middle, middle)
    report["from_earliest"] = await caught(streamcast.EARLIEST, floor)

    # 4. where=: only the matching rows, from the table and the socket alike
    async with streamcast.connect(url, offset=floor, catch_up=True,
                                  where={"symbol": "BTCUSD"}) as sub:
        want = [i for i in range(floor, end) if row(i)["symbol"] == "BTCUSD"]
        got = []
        while len(got) < len(want):
            offset, ts, message = await asyncio.wait_for(sub.recv(), 30)
            assert message["symbol"] == "BTCUSD" and message == row(offset), (offset, message)
            got.append(offset)
        assert got == want, (got[:3], want[:3])
        report["where"] = len(got)

    # 5. Stream.snapshot on the greeting's hint
    snap = await streamcast.Stream.snapshot(probe["metadata"])
    async with snap:
        t = await snap.sql("SELECT count(*) n, count(litelink_offset) non_null, "
                           "min(litelink_offset) lo, max(litelink_offset) hi FROM log").read_all()
        s = {k: v[0] for k, v in t.to_pydict().items()}
        s["end_offset"] = snap.end_offset
    n = published_end - floor
    assert (s["n"], s["non_null"], s["lo"], s["hi"], s["end_offset"]) == \
        (n, n, floor, published_end - 1, published_end), s
    report["snapshot"] = s
    report["engines"] = engines(probe["metadata"], floor, published_end)
    return report


def s3_options(uri: str):
    """The client's S3 options for `uri` (`None` for a local one): everything from the AWS_*
    environment, as the official client resolves it (tests/published_s3.rs sets it)."""
    if not uri.startswith("s3://"):
        return None
    import litelink

    return litelink.S3Options().resolved()


def catalog_properties(uri: str) -> dict:
    """pyiceberg's properties for reading `uri` (the endpoint and keys for s3://)."""
    options = s3_options(uri)
    return {} if options is None else options.catalog_properties()


def read_text(uri: str) -> str:
    """A small object (a hint, a stream metadata document), `file://` or `s3://`, read through
    pyiceberg's FileIO as the client's catch-up reads it."""
    if uri.startswith("file://"):
        return Path(uri[len("file://"):]).read_text()
    from pyiceberg.io import load_file_io

    with load_file_io(catalog_properties(uri), uri).new_input(uri).open() as f:
        return f.read().decode()


def table_metadata(hint_uri: str) -> str:
    """The table's current metadata path, resolved as the client resolves it: the stream
    metadata's hint, the stream metadata it names, the table's own hint."""
    import litelink

    home = hint_uri.rsplit("/", 1)[0]
    doc = json.loads(read_text(f"{home}/{read_text(hint_uri).strip()}"))
    location = f"{doc['live_log']['published']}/{doc['live_log']['name']}"
    assert location.split("://")[0] == hint_uri.split("://")[0], (location, hint_uri)
    return litelink.current_metadata(location, s3_options=s3_options(location))


def engines(hint_uri: str, floor: int, published_end: int) -> dict:
    """DuckDB iceberg_scan and pyiceberg read the table with the right types and values."""
    import litelink
    from pyiceberg.table import StaticTable

    path = table_metadata(hint_uri)
    # on S3: httpfs and the S3 secret from the environment (litelink's own provisioning)
    con = litelink.duckdb_connection(s3_options=s3_options(path))
    types = {r[0]: r[1] for r in con.sql(f"DESCRIBE SELECT * FROM iceberg_scan('{path}')").fetchall()}
    assert types == {"litelink_offset": "BIGINT", "event_ts": "BIGINT", "price": "DOUBLE",
                     "amount": "DOUBLE", "side": "INTEGER", "symbol": "VARCHAR",
                     "trade_id": "BIGINT", "streamcast_ts": "BIGINT"}, types
    rows = con.sql(f"SELECT * FROM iceberg_scan('{path}') ORDER BY litelink_offset").fetchall()
    cols = [c for c in types]
    assert [r[0] for r in rows] == list(range(floor, published_end)), "duckdb offsets"
    for r in rows:
        d = dict(zip(cols, r))
        i = d.pop("litelink_offset")
        d.pop("streamcast_ts")
        assert d == row(i), (i, d)
    static = StaticTable.from_metadata(path, properties=catalog_properties(path))
    schema = {f.name: str(f.field_type) for f in static.schema().fields}
    assert schema == {"litelink_offset": "long", "event_ts": "long", "price": "double",
                      "amount": "double", "side": "int", "symbol": "string",
                      "trade_id": "long", "streamcast_ts": "long"}, schema
    tasks = list(static.scan().plan_files())
    low = min(int.from_bytes(t.file.lower_bounds[1], "little", signed=True) for t in tasks)
    high = max(int.from_bytes(t.file.upper_bounds[1], "little", signed=True) for t in tasks)
    assert (low, high + 1) == (floor, published_end), (low, high)
    arrow = static.scan().to_arrow()
    offsets = sorted(arrow.column("litelink_offset").to_pylist())
    assert offsets == list(range(floor, published_end)), "pyiceberg offsets"
    return {"duckdb_rows": len(rows), "pyiceberg_rows": arrow.num_rows, "data_files": len(tasks)}


def table(data: str, hint_uri: str = "") -> dict:
    """A reader of the table with no server: whatever version the hint names must be whole,
    every row once from its floor to its end, with the right values. The table is the one of
    the stream directory `data` (local), or the one the stream metadata hint `hint_uri` names
    (`s3://` too)."""
    from pyiceberg.table import StaticTable

    if not hint_uri:
        name = Path(data).name
        hint_uri = f"file://{data}/{name}.metadata/version-hint.text"
        if not Path(data, "published", name, "metadata", "version-hint.text").exists():
            return {"table": None}
    path = table_metadata(hint_uri)
    static = StaticTable.from_metadata(path, properties=catalog_properties(path))
    tasks = list(static.scan().plan_files())
    if not tasks:
        return {"table": "empty"}
    low = min(int.from_bytes(t.file.lower_bounds[1], "little", signed=True) for t in tasks)
    high = max(int.from_bytes(t.file.upper_bounds[1], "little", signed=True) for t in tasks)
    return {"floor": low, "end": high + 1, "metadata": path, **engines(hint_uri, low, high + 1)}


async def below(url: str, first: int, floor: int, end: int) -> dict:
    report = {}
    try:
        async with streamcast.connect(url, offset=first, catch_up=True) as sub:
            offset, _, _ = await sub.recv()
            raise AssertionError(f"catch-up from {first} below the floor {floor} gave {offset}")
    except streamcast.CatchUpUnavailable as e:
        assert str(floor) in str(e), e
        report["refused"] = str(e).split(".")[0]
    async with streamcast.connect(url, offset=streamcast.EARLIEST, catch_up=True) as sub:
        got = await read_until(sub, end - 1)
    assert got == list(range(got[0], end)) and got[0] >= floor, (got[:3], floor)
    report["earliest"] = {"first": got[0], "rows": len(got)}
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=["publish", "wait", "catch_up", "below", "table"])
    ap.add_argument("--data", default="")
    ap.add_argument("--hint", default="")
    ap.add_argument("--url", required=True)
    ap.add_argument("--first", type=int, default=1)
    ap.add_argument("--end", type=int, default=0)
    ap.add_argument("--floor", type=int, default=1)
    ap.add_argument("--published-end", type=int, default=0)
    ap.add_argument("--live", type=int, default=10)
    a = ap.parse_args()
    if a.step == "publish":
        asyncio.run(publish(a.url, a.first, a.end))
        out = {"published": [a.first, a.end - 1]}
    elif a.step == "wait":
        out = wait(a.url)
    elif a.step == "catch_up":
        out = asyncio.run(catch_up(a.url, a.floor, a.published_end, a.end, a.live))
    elif a.step == "table":
        out = table(a.data, a.hint)
    else:
        out = asyncio.run(below(a.url, a.first, a.floor, a.end))
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()

"""Reads a corecast Parquet segment with pyarrow and DuckDB and checks it against what the Rust
test expected (storage/tests/tier_interop.rs).

Usage: check_segment.py SEGMENT.parquet EXPECTED.json

EXPECTED.json: {"rows": [[offset, ts_us, "<canonical row JSON>"], ...],
                "types": {"<column>": "<pyarrow type string>", ...},
                "duckdb_types": {"<column>": "<DuckDB type name>", ...}}

Checks: the column order (litelink_offset, declared..., streamcast_ts); each column's pyarrow
type; PARQUET field ids (1..N+2 at the top level, unique across the schema, as DuckDB's
parquet_schema() reports them); ZSTD on every column chunk; statistics present; the row count;
every value (pyarrow, type-aware: binary as the field's streamcast.encoding text, maps as
ordered objects, float32 compared at float32 precision); and from DuckDB the row count, the
offset range, the column types and the scalar values. Prints "ok: ..." and exits 0, or raises.
"""

import base64
import json
import math
import struct
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def normalize(value, field_type, encoding):
    """A pyarrow value as the JSON the validator would have written (decoded by json.loads)."""
    if value is None:
        return None
    if pa.types.is_binary(field_type) or pa.types.is_fixed_size_binary(field_type):
        if encoding == "base16":
            return value.hex()
        return base64.b64encode(value).decode()
    if pa.types.is_struct(field_type):
        return {
            field_type.field(i).name: normalize(
                value[field_type.field(i).name],
                field_type.field(i).type,
                enc_of(field_type.field(i)),
            )
            for i in range(field_type.num_fields)
        }
    if pa.types.is_map(field_type):
        item = field_type.item_field
        return {k: normalize(v, item.type, enc_of(item)) for k, v in value}
    if pa.types.is_list(field_type):
        item = field_type.value_field
        return [normalize(v, item.type, enc_of(item)) for v in value]
    return value


def type_text_of(t):
    """The type as text; maps spelled out (pyarrow's str() of a map varies across versions)."""
    if pa.types.is_map(t):
        value = t.item_field
        null = "" if value.nullable else " not null"
        return f"map<{type_text_of(t.key_type)}, {type_text_of(value.type)}{null}>"
    return str(t)


def enc_of(field):
    md = field.metadata or {}
    raw = md.get(b"streamcast.encoding")
    return raw.decode() if raw else None


def same(got, want, field_type):
    """Compares a normalized pyarrow value with the json.loads of the canonical row."""
    if want is None or got is None:
        return got is None and want is None
    if pa.types.is_float32(field_type):
        return f32(float(want)) == got
    if pa.types.is_floating(field_type):
        return float(want) == got and math.copysign(1, float(want)) == math.copysign(1, got)
    if pa.types.is_struct(field_type):
        return list(got) == list(want) and all(
            same(got[f.name], want[f.name], f.type) for f in field_type
        )
    if pa.types.is_map(field_type):
        item = field_type.item_field
        return list(got) == list(want) and all(same(got[k], want[k], item.type) for k in got)
    if pa.types.is_list(field_type):
        item = field_type.value_field
        return len(got) == len(want) and all(same(g, w, item.type) for g, w in zip(got, want))
    if pa.types.is_boolean(field_type):
        return got is want
    return got == want and type(got) is type(want)


def main():
    path, expected_path = sys.argv[1], sys.argv[2]
    with open(expected_path, encoding="utf-8") as f:
        expected = json.load(f)
    rows = expected["rows"]

    pf = pq.ParquetFile(path)
    schema = pf.schema_arrow
    names = schema.names
    declared = list(expected["types"])
    assert names == ["litelink_offset", *declared, "streamcast_ts"], names
    assert schema.field("litelink_offset").type == pa.int64()
    assert not schema.field("litelink_offset").nullable
    assert schema.field("streamcast_ts").type == pa.int64()
    for name, type_text in expected["types"].items():
        got = type_text_of(schema.field(name).type)
        assert got == type_text, f"{name}: pyarrow type {got}, expected {type_text}"
    top_ids = [int(schema.field(i).metadata[b"PARQUET:field_id"]) for i in range(len(names))]
    assert top_ids == list(range(1, len(names) + 1)), top_ids

    md = pf.metadata
    assert md.num_rows == len(rows), (md.num_rows, len(rows))
    for rg in range(md.num_row_groups):
        group = md.row_group(rg)
        assert group.num_rows <= 65536
        for c in range(group.num_columns):
            col = group.column(c)
            assert col.compression == "ZSTD", col.compression
            assert col.is_stats_set, f"no statistics on {col.path_in_schema}"
        assert group.column(0).statistics.has_min_max

    table = pf.read()
    offsets = table.column("litelink_offset").to_pylist()
    assert offsets == [r[0] for r in rows], "offsets"
    assert offsets == sorted(offsets)
    assert table.column("streamcast_ts").to_pylist() == [r[1] for r in rows], "ts"
    for name in declared:
        field = schema.field(name)
        column = table.column(name).to_pylist()
        for i, (offset, _, text) in enumerate(rows):
            want = json.loads(text)[name]
            got = normalize(column[i], field.type, enc_of(field))
            assert same(got, want, field.type), f"offset {offset} {name}: pyarrow {got!r}, row {want!r}"

    con = duckdb.connect()
    sql_path = path.replace("'", "''")
    n, lo, hi = con.execute(
        f"SELECT count(*), min(litelink_offset), max(litelink_offset) FROM read_parquet('{sql_path}')"
    ).fetchone()
    assert (n, lo, hi) == (len(rows), rows[0][0], rows[-1][0]), (n, lo, hi)
    described = {
        r[0]: r[1]
        for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{sql_path}')").fetchall()
    }
    for name, type_text in expected["duckdb_types"].items():
        assert described[name] == type_text, f"{name}: DuckDB type {described[name]}, expected {type_text}"
    ids = con.execute(
        f"SELECT name, field_id FROM parquet_schema('{sql_path}') WHERE field_id IS NOT NULL"
    ).fetchall()
    all_ids = [i for _, i in ids]
    assert len(all_ids) == len(set(all_ids)), f"field ids repeat: {ids}"
    assert sorted(all_ids) == list(range(1, len(all_ids) + 1)), f"field ids: {ids}"
    scalars = [
        name
        for name in declared
        if not (
            pa.types.is_nested(schema.field(name).type)
            or pa.types.is_binary(schema.field(name).type)
            or pa.types.is_fixed_size_binary(schema.field(name).type)
        )
    ]
    if scalars:
        cols = ", ".join(f'"{c}"' for c in scalars)
        got_rows = con.execute(
            f"SELECT {cols} FROM read_parquet('{sql_path}') ORDER BY litelink_offset"
        ).fetchall()
        for (offset, _, text), got in zip(rows, got_rows):
            want = json.loads(text)
            for name, g in zip(scalars, got):
                assert same(g, want[name], schema.field(name).type), (
                    f"DuckDB offset {offset} {name}: {g!r}, row {want[name]!r}"
                )
    print(
        f"ok: {len(rows)} rows, {len(names)} columns, {md.num_row_groups} row groups, "
        f"{len(all_ids)} field ids; pyarrow {pa.__version__}, duckdb {duckdb.__version__}"
    )


if __name__ == "__main__":
    main()

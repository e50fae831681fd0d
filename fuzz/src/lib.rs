//! Helpers shared by the fuzz targets: a small deterministic PRNG (to derive splits and
//! choices from the fuzz input itself), the schemas the row and segment targets use, and the
//! seed corpora, generated from the repository's tests and the shared data sets (`seeds`).

pub mod seeds;

use corecast_storage::schema::{RowCodec, Schema};

/// xorshift64* seeded through splitmix64 (as `net/tests/ws_split_equivalence.rs`).
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)).max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// In `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The table-driven test schema of `storage/tests/schema_validate.rs`: one column of every
/// kind (struct, map, list, binary encodings, fixed width).
pub const KITCHEN_SINK_SCHEMA: &str = r#"{"type":"object","properties":{
    "b":{"type":"boolean"},
    "i":{"type":"integer"},
    "i32":{"type":"integer","format":"int32"},
    "f":{"type":"number"},
    "f32":{"type":"number","format":"float"},
    "s":{"type":"string"},
    "ns":{"type":["string","null"]},
    "hex":{"type":["string","null"],"contentEncoding":"base16"},
    "b64":{"type":["string","null"],"contentEncoding":"base64"},
    "fix":{"type":["string","null"],"contentEncoding":"base16","format":"bytes4"},
    "st":{"type":["object","null"],"properties":{"x":{"type":"integer"},"y":{"type":["string","null"]}},"required":["x"]},
    "m":{"type":["object","null"],"additionalProperties":{"type":"number"}},
    "levels":{"type":["array","null"],"items":{"type":"object","properties":{"px":{"type":"number"},"qty":{"type":"integer","format":"int32"}},"required":["px","qty"]}}
},"required":["b","i","i32","f","f32","s"]}"#;

/// The shared data sets with a schema: `(jsonl, schema)` file names under `shared/data`.
pub const DATA_SETS: &[(&str, &str)] = &[
    ("btcusdt-trades.jsonl", "btcusdt-trades.schema.json"),
    ("es-mbp1.jsonl", "es-mbp1.schema.json"),
    ("es-mbo.jsonl", "es-mbo.schema.json"),
];

/// `shared/data/NAME` (the checkout's sibling `shared/`, as the tests find it).
pub fn data_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data")
        .join(name)
}

/// A repository file, relative to the repository root.
pub fn repo_path(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

/// The codecs the row and segment targets choose from by the input's first byte: schema-less,
/// the kitchen-sink schema, then each shared data set's schema (those whose file is present).
pub fn codecs() -> Vec<RowCodec> {
    let mut out = vec![
        RowCodec::Schemaless,
        RowCodec::Schema(Schema::compile(KITCHEN_SINK_SCHEMA).expect("test schema compiles")),
    ];
    for (_, schema) in DATA_SETS {
        if let Ok(text) = std::fs::read_to_string(data_path(schema)) {
            out.push(RowCodec::Schema(
                Schema::compile(&text).expect("shared schema compiles"),
            ));
        }
    }
    out
}

/// A fixed kitchen-sink row that validates (the base row of `schema_validate.rs`, all filled).
pub const KITCHEN_SINK_ROW: &str = r#"{"b":true,"i":1,"i32":2,"f":1.5,"f32":0.5,"s":"x","ns":"é\n","hex":"00ff","b64":"AAEC","fix":"deadbeef","st":{"x":3,"y":null},"m":{"k":1e-7,"j":-2.5},"levels":[{"px":1.25,"qty":7},{"px":-0.0,"qty":-2147483648}]}"#;

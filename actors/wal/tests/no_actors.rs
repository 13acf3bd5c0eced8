//! The write-ahead log builds without actix and tokio, so that a driver
//! without an actor runtime (the simulator, a tool) can run the very log the
//! nodes run.

use std::path::Path;

#[test]
fn the_wal_depends_on_no_actor_runtime() {
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).expect("manifest");
    for crate_name in ["actix", "tokio", "tracing"] {
        let depends = manifest.lines().any(|line| line.trim_start().starts_with(crate_name) && line.contains('='));
        assert!(!depends, "cohort-wal must not depend on {crate_name}");
    }
}

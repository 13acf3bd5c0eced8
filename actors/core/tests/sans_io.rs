//! The core is sans-IO: nothing under `actors/core/src/` may use actix,
//! tokio, the network, the file system, threads or a clock, nor `tracing` or
//! OpenTelemetry (spans are the actors' job). This test reads the sources and
//! fails on the first forbidden path, so a violation cannot land unnoticed;
//! the simulator and a network client build on the core without actix.

use std::path::Path;

const FORBIDDEN: &[&str] = &[
    "actix",
    "tokio",
    "std::net",
    "std::fs",
    "std::time",
    "std::thread",
    "std::process",
    "Instant::now",
    "SystemTime",
    "std::env",
    "tracing",
    "opentelemetry",
];

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn core_is_sans_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 10, "found the core's sources");
    let mut hits = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable source");
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for word in FORBIDDEN {
                if code.contains(word) {
                    hits.push(format!("{}:{}: uses {word}", file.display(), number + 1));
                }
            }
        }
    }
    assert!(hits.is_empty(), "the core must stay sans-IO:\n{}", hits.join("\n"));
}

#[test]
fn the_core_crate_depends_on_no_tracing_and_no_actor_runtime() {
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).expect("manifest");
    for crate_name in ["tracing", "opentelemetry", "actix", "tokio"] {
        let depends = manifest.lines().any(|line| line.trim_start().starts_with(crate_name) && line.contains('='));
        assert!(!depends, "cohort-core must not depend on {crate_name}");
    }
}

#[test]
fn sans_io_check_bites() {
    // The same scan over a line that imports tokio must find it.
    let line = "use tokio::net::TcpStream;";
    assert!(FORBIDDEN.iter().any(|word| line.contains(word)));
}

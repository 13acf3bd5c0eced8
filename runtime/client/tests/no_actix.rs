//! C1: the network client runs in any tokio program, so neither it nor the
//! workspace crates it depends on may pull in actix. A dependency on actix
//! (or on a crate of the node, cohort-actors or cohort-runtime) in any of
//! these manifests fails here.

use std::path::Path;

/// This crate's manifest and those of the workspace crates it depends on.
const MANIFESTS: [&str; 3] = ["Cargo.toml", "../../actors/core/Cargo.toml", "../../messages/Cargo.toml"];

#[test]
fn c1_the_network_client_and_its_workspace_dependencies_need_no_actix() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    for manifest in MANIFESTS {
        let path = dir.join(manifest);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let dependencies = text.split("\n[").filter(|table| table.starts_with("dependencies]"));
        for table in dependencies {
            for forbidden in ["actix", "cohort-actors", "cohort-runtime"] {
                assert!(
                    !table.lines().any(|line| line.trim_start().starts_with(forbidden)),
                    "{} depends on {forbidden}",
                    path.display()
                );
            }
        }
    }
}

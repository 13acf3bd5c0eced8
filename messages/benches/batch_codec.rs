//! Criterion benchmark of the Commit batch codec (written with issue #2).
fn main() {}

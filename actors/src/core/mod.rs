//! The sans-IO protocol core.
//!
//! Nothing in this module tree may import actix, tokio, `std::net`, `std::fs`
//! or read a clock; `tests/sans_io.rs` fails the build's tests if one appears.

pub mod storage;

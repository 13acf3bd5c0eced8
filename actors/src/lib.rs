//! cohort's replica core and the actors that shell it.
//!
//! [`core`] is sans-IO: plain Rust with no actix, no tokio, no clock and no
//! I/O. It takes messages and ticks and returns commands. The actix actors of
//! the runtime and the deterministic simulator both drive this same code.

pub mod core;

//! Code the examples share. Each example is a binary under `src/bin/`; what
//! is big enough to test on its own lives here.

pub mod kv_store;

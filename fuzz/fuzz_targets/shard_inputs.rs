//! Fuzz target: a shard of the core driven by a script of peer frames,
//! batches, client requests, ticks, flushes, storage faults and restarts
//! decoded from the input (see `cohort_fuzz::shard_inputs`).
//!
//! Checked: no panic with debug assertions on (so no assertion, index or
//! overflow is reachable by a message the decoder accepts); every message
//! the shard sends is valid; the storage contract, the shard's invariants
//! after every step, and recovery of what it made durable.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cohort_fuzz::shard_inputs::run(data);
});

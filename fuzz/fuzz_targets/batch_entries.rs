//! Fuzz target: arbitrary bytes as the body of a Commit batch and of a
//! CommitReply batch, decoded directly and through a frame.
//!
//! Checked: no panic; a body is accepted exactly when it is a whole number of
//! entries; every entry yields one result at its own index; a good entry
//! re-encodes to its bytes; frame and direct decoding agree.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cohort_fuzz::check_batch_body(data);
});

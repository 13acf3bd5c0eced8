//! Client ids for exactly-once: 128 bits that no other client of any
//! process is likely to have. The core takes ids as values (it draws no
//! randomness); the actors and the runtime make them here.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use cohort_messages::ClientId;

/// A client id no other client of any process is likely to have: 128 bits
/// from the process's random hasher keys, the time and a counter.
///
/// ```
/// use cohort_actors::client_id::fresh_client_id;
/// assert_ne!(fresh_client_id(), fresh_client_id());
/// ```
pub fn fresh_client_id() -> ClientId {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let half = |salt: u64| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(salt);
        hasher.write_u64(count);
        hasher.write_u128(nanos);
        hasher.write_u32(std::process::id());
        hasher.finish()
    };
    ClientId((u128::from(half(1)) << 64) | u128::from(half(2)) | 1)
}

//! Client ids for exactly-once: 128 bits that no other client of any
//! process is likely to have, or can guess (T2). The core takes ids as
//! values (it draws no randomness); the actors and the runtime make them
//! here, and bind a network client's ids to its authenticated identity
//! ([`bound_client_id`]), so one client cannot answer for, or hijack, the
//! request numbers of another.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use cohort_messages::ClientId;

/// A client id nobody can guess: 128 bits from the operating system's
/// random source.
///
/// ```
/// use cohort_actors::client_id::fresh_client_id;
/// assert_ne!(fresh_client_id(), fresh_client_id());
/// ```
pub fn fresh_client_id() -> ClientId {
    let mut bytes = [0u8; 16];
    match ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes) {
        Ok(()) => ClientId(u128::from_le_bytes(bytes) | 1),
        // The system's source never fails on Linux; if it did, the ids stay
        // unique (keys, time, counter), if no longer unguessable.
        Err(_) => fallback_client_id(),
    }
}

/// T2: the id the cluster uses for `client` when it comes from a client
/// whose authenticated identity is `identity` (the SHA-256 of its
/// certificate, [`crate::tls::identity_of`]): a hash of both, the same on
/// every node, so a retry through another node after a redirect or a
/// failover finds its request, while another identity sending the same id
/// lands on a different one.
pub fn bound_client_id(identity: &[u8; 32], client: ClientId) -> ClientId {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    context.update(b"cohort client id\0");
    context.update(identity);
    context.update(&client.0.to_le_bytes());
    let digest = context.finish();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.as_ref()[..16]);
    ClientId(u128::from_le_bytes(bytes) | 1)
}

fn fallback_client_id() -> ClientId {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t2_bound_ids_differ_by_identity_and_agree_across_calls() {
        let (alice, bob) = ([1u8; 32], [2u8; 32]);
        let chosen = ClientId(42);
        assert_eq!(bound_client_id(&alice, chosen), bound_client_id(&alice, chosen), "every node agrees");
        assert_ne!(bound_client_id(&alice, chosen), bound_client_id(&bob, chosen), "bob cannot reach alice's id");
        assert_ne!(bound_client_id(&alice, chosen), chosen, "the chosen id is not used as it is");
    }
}

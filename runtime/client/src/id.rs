//! Client ids nobody can guess (T2).
//!
//! The node binds every id a client chooses to the client's certificate
//! (`bound_client_id` in cohort-actors: a hash of the certificate's SHA-256
//! and the chosen id), so another certificate can never reach this client's
//! request numbers. Two things remain for the client to do, and this module
//! does the first: every process that shares one client certificate (many
//! `cohort write` runs with the same files) must choose ids that differ, and
//! on an insecure cluster, where every client has the same identity, the id
//! alone keeps clients apart. So ids are 128 bits from the operating
//! system's random source (through rustls' *ring* provider, which the TLS
//! side already links). The second is the caller's: a retry must go out
//! under the same certificate, or it is another client's request.
//!
//! This is the one generator of client ids in cohort: the node's own
//! clients (its agent, operator client and embedded `Client`) draw theirs
//! here too. When the random source fails there is no fallback: an id
//! that can be guessed would let another client reach this one's request
//! numbers, so the caller gets [`NoRandomness`] and sends nothing.

use std::sync::OnceLock;

use cohort_messages::ClientId;
use rustls::crypto::SecureRandom;

/// The operating system's random source failed, so no unguessable client
/// id can be drawn (T2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the system's random source failed: no unguessable client id can be drawn")]
pub struct NoRandomness;

fn random() -> &'static dyn SecureRandom {
    static RANDOM: OnceLock<&'static dyn SecureRandom> = OnceLock::new();
    *RANDOM.get_or_init(|| rustls::crypto::ring::default_provider().secure_random)
}

/// A fresh client id: 128 random bits, never 0 (reserved for seal entries).
///
/// ```
/// let a = cohort_client::fresh_client_id().unwrap();
/// let b = cohort_client::fresh_client_id().unwrap();
/// assert_ne!(a, b);
/// ```
pub fn fresh_client_id() -> Result<ClientId, NoRandomness> {
    let mut bytes = [0u8; 16];
    random().fill(&mut bytes).map_err(|_| NoRandomness)?;
    let id = ClientId(u128::from_le_bytes(bytes) | 1);
    debug_assert_ne!(id, ClientId::SEAL, "client 0 is reserved");
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t2_fresh_ids_are_distinct_and_never_the_reserved_zero() {
        let ids: std::collections::HashSet<ClientId> =
            (0..1000).map(|_| fresh_client_id().expect("randomness")).collect();
        assert_eq!(ids.len(), 1000);
        assert!(!ids.contains(&ClientId::SEAL));
    }
}

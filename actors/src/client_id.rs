//! Client ids for exactly-once: 128 bits that no other client of any
//! process is likely to have, or can guess (T2). The core takes ids as
//! values (it draws no randomness); every id is drawn by the one generator,
//! [`cohort_client::fresh_client_id`]. The node binds a network client's
//! ids to its authenticated identity here ([`bound_client_id`]), so one
//! client cannot answer for, or hijack, the request numbers of another.

use cohort_messages::ClientId;

/// A client id for one of the node's own clients (its agent's reads, its
/// operator client, a shard's pair epoch), from the one generator of
/// client ids ([`cohort_client::fresh_client_id`]).
///
/// A node that cannot draw an unguessable id cannot keep other clients
/// away from its requests (T2), and these callers have no one to hand an
/// error to: this panics, naming the cause, instead of making up an id
/// that could be guessed. The node checks the random source once at start
/// (`NodeBuilder::start` fails with `NodeError::NoRandomness`), so only a
/// source that fails later (a dead environment) gets here.
pub(crate) fn fresh_client_id() -> ClientId {
    match cohort_client::fresh_client_id() {
        Ok(id) => id,
        Err(error) => panic!("{error}: the node cannot go on without unguessable client ids (T2)"),
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

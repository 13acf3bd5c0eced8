//! K5 on real nodes: many ops in one request, through the embedded client
//! and the network client over mTLS, to a group whose state machine takes
//! op batches; each op gets its own result, in order, and a group of the
//! other kind refuses what is not its kind, applying nothing.

use std::time::Duration;

use bytes::Bytes;
use cohort_runtime::network::ClientError as NetworkError;
use cohort_runtime::prelude::*;

const SUMS: GroupId = GroupId(1);
const REGISTER: GroupId = GroupId(2);

/// Sums amounts (u64 LE); each op's result is the total after it.
#[derive(Default)]
struct Sums(u64);

impl StateMachine for Sums {
    fn apply(&mut self, _op: Op, operation: &[u8]) -> Bytes {
        self.0 += operation.try_into().map(u64::from_le_bytes).unwrap_or(0);
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn takes_op_batches(&self) -> bool {
        true
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn snapshot(&self) -> Bytes {
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0 = u64::from_le_bytes(snapshot.try_into().map_err(|_| "a sum is 8 bytes".to_string())?);
        Ok(())
    }
}

fn cluster() -> LocalCluster {
    LocalCluster::builder(3)
        .client_ports()
        .group_kind("sums", |_| Box::new(Sums::default()))
        .group_kind("register", |_| Box::new(Register::default()))
        .groups("sums", [SUMS])
        .groups("register", [REGISTER])
        .start()
        .expect("cluster starts")
}

fn amounts(values: &[u64]) -> Vec<Bytes> {
    values.iter().map(|value| Bytes::copy_from_slice(&value.to_le_bytes())).collect()
}

fn totals(results: &[Bytes]) -> Vec<u64> {
    results.iter().map(|result| u64::from_le_bytes(result[..].try_into().expect("8 bytes"))).collect()
}

#[actix_rt::test]
async fn k5_a_batch_of_ops_commits_at_one_op_with_a_result_per_op_through_both_clients() {
    let cluster = cluster();
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    let client = cluster.client().timeout(Duration::from_secs(20));
    let first = client.write_batch(SUMS, amounts(&[1, 2, 3])).await.expect("the batch commits");
    assert_eq!(totals(&first.results), vec![1, 3, 6], "each op's result, in order");

    let network = cluster.network_client().expect("a network client").timeout(Duration::from_secs(20));
    let second = network.write_batch(SUMS, amounts(&[10, 20])).await.expect("the batch commits");
    assert_eq!(totals(&second.results), vec![16, 36], "applied after the first batch, in order");
    assert!(second.op > first.op);

    // 1,000 ops in one request.
    let many = client.write_batch(SUMS, amounts(&[1; 1000])).await.expect("the batch commits");
    assert_eq!(many.results.len(), 1000);
    assert_eq!(totals(&many.results)[999], 1036);
    let read = client.read(SUMS, "").await.expect("read");
    assert_eq!(read.result, Bytes::copy_from_slice(&1036u64.to_le_bytes()), "every op applied once");
    cluster.stop();
}

#[actix_rt::test]
async fn k5_each_group_refuses_the_kind_of_write_its_state_machine_does_not_take() {
    let cluster = cluster();
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    let client = cluster.client().timeout(Duration::from_secs(20));
    match client.write_batch(REGISTER, ["a", "b"]).await {
        Err(ClientError::Refused { code: ReplyError::Rejected, detail, .. }) => {
            assert!(detail.contains("one op per write"), "{detail}");
        }
        other => panic!("a batch to a group of plain writes is refused: {other:?}"),
    }
    let register = client.read(REGISTER, "").await.expect("read");
    assert_eq!(register.result, Bytes::new(), "nothing was written to the register");

    let network = cluster.network_client().expect("a network client").timeout(Duration::from_secs(20));
    match network.write(SUMS, Bytes::copy_from_slice(&5u64.to_le_bytes())).await {
        Err(NetworkError::Refused { code: ReplyError::Rejected, reason, .. }) => {
            assert!(reason.contains("write_batch"), "{reason}");
        }
        other => panic!("a plain write to a group of batches is refused: {other:?}"),
    }
    match client.write_batch(SUMS, Vec::<Bytes>::new()).await {
        Err(ClientError::OpBatch { detail, .. }) => assert!(detail.contains("0 ops"), "{detail}"),
        other => panic!("an empty batch is refused before it is sent: {other:?}"),
    }
    let sums = client.read(SUMS, "").await.expect("read");
    assert_eq!(sums.result, Bytes::copy_from_slice(&0u64.to_le_bytes()), "nothing applied");
    cluster.stop();
}

#[actix_rt::test]
async fn k5_a_linger_gathers_independent_writes_into_batches_each_answered_alone() {
    let cluster = cluster();
    assert!(cluster.wait_connected(Duration::from_secs(10)).await);
    let client = cluster.client().timeout(Duration::from_secs(20));
    let config = LingerConfig { linger: Duration::from_millis(50), batch_ops_max: 8, ..LingerConfig::default() };
    let linger = client.linger(SUMS, config).expect("a valid linger");
    // 20 writes at once: two full batches of 8 go at once, the last 4
    // when the linger's time is up.
    let writes: Vec<_> = (0..20)
        .map(|_| {
            let linger = linger.clone();
            actix_rt::spawn(async move { linger.write(Bytes::copy_from_slice(&1u64.to_le_bytes())).await })
        })
        .collect();
    let mut answers = Vec::new();
    for write in writes {
        answers.push(write.await.expect("the task ran").expect("the write commits"));
    }
    let mut places: Vec<(Op, usize, u64)> = answers
        .iter()
        .map(|answer| (answer.op, answer.index, totals(std::slice::from_ref(&answer.result))[0]))
        .collect();
    places.sort();
    let batches: std::collections::BTreeSet<Op> = places.iter().map(|(op, ..)| *op).collect();
    assert_eq!(batches.len(), 3, "8 + 8 + 4 writes in three batches: {places:?}");
    let in_order: Vec<u64> = places.iter().map(|(.., total)| *total).collect();
    assert_eq!(in_order, (1..=20).collect::<Vec<u64>>(), "each write's own result, ordered by (op, index)");

    let refused = client.linger(SUMS, LingerConfig { batch_ops_max: 0, ..LingerConfig::default() });
    assert!(matches!(refused, Err(ClientError::OpBatch { .. })), "a batch of no ops");
    cluster.stop();
}

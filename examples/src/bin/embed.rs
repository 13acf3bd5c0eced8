//! A host app that embeds a 3-node cohort cluster in its own process: real
//! nodes on loopback TCP with write-ahead logs in a temporary directory. It
//! registers a group kind with its state machine, writes through a client
//! (which finds each group's primary), reads back linearizably and watches a
//! group's roles. Run: `cargo run -p cohort-examples --bin embed`.

use cohort_runtime::prelude::*;

/// The host's replicated state, one per group: a running total.
#[derive(Default)]
struct Total(u64);

impl StateMachine for Total {
    fn apply(&mut self, _op: Op, amount: &[u8]) -> Bytes {
        self.0 += amount.try_into().map(u64::from_le_bytes).unwrap_or(0);
        self.snapshot()
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        self.snapshot()
    }
    fn snapshot(&self) -> Bytes {
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.0 = u64::from_le_bytes(snapshot.try_into().map_err(|_| "a total is 8 bytes")?);
        Ok(())
    }
}

/// The example takes no flags but `--help`.
#[derive(clap::Parser)]
#[command(about = "A host app that embeds a 3-node cohort cluster and keeps running totals")]
struct Flags {}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Flags {} = clap::Parser::parse();
    actix_rt::System::new().block_on(async {
        let cluster = LocalCluster::builder(3)
            .group_kind("total", |_| Box::new(Total::default()))
            .groups("total", (0..4).map(GroupId))
            .start()?;
        let client = cluster.client();
        for amount in 1..=100u64 {
            client.write(GroupId(amount % 4), Bytes::copy_from_slice(&amount.to_le_bytes())).await?;
        }
        let mut roles = cluster.handles()[0].subscribe(GroupId(0)).await.ok_or("group 0 is not on node 1")?;
        for group in (0..4).map(GroupId) {
            let total = client.read(group, Bytes::new()).await?.result;
            println!("{group}: total {}", u64::from_le_bytes(total[..].try_into()?));
        }
        println!("node 1 saw: {:?}", roles.try_recv()?);
        Ok(())
    })
}

//! A custom group actor: a word index that follows a group of notes.
//!
//! The group kind "notes" has a plain state machine (the list of notes) and a
//! custom actor, `WordIndex`, that cohort runs beside every replica of every
//! notes group. cohort feeds it the applied notes in op order, each once, and
//! its role; it keeps an inverted index (word → note numbers) and answers
//! searches from it:
//!
//! - a *local* search answers at once from this replica's index: possibly
//!   stale (a backup lags its primary);
//! - a *linearizable* search first asks cohort for a read (served by the
//!   primary within its quorum window, V7), takes the applied point that read
//!   saw, and answers once the index has reached it. This works on any
//!   replica, backups included (a read index).
//!
//! Then the primary of group 0 is stopped, and the index actors of the other
//! nodes report the new primary. Run:
//! `cargo run -p cohort-examples --bin custom_actor`.

use std::collections::HashMap;
use std::time::Duration;

use actix::prelude::*;
use cohort_runtime::prelude::*;
use tokio::sync::oneshot;

/// The replicated state: the notes, in order. A write appends a note and
/// returns its number; a read returns the count.
#[derive(Default)]
struct Notes(Vec<String>);

impl StateMachine for Notes {
    fn apply(&mut self, _op: Op, note: &[u8]) -> Bytes {
        self.0.push(String::from_utf8_lossy(note).into_owned());
        Bytes::copy_from_slice(&(self.0.len() as u64 - 1).to_le_bytes())
    }
    fn read(&self, _query: &[u8]) -> Bytes {
        Bytes::copy_from_slice(&(self.0.len() as u64).to_le_bytes())
    }
    fn snapshot(&self) -> Bytes {
        self.0.join("\n").into()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(snapshot).map_err(|error| error.to_string())?;
        self.0 = if text.is_empty() { Vec::new() } else { text.split('\n').map(String::from).collect() };
        Ok(())
    }
}

/// The custom actor: an inverted index of one notes group on one node.
struct WordIndex {
    replica: GroupReplica,
    words: HashMap<String, Vec<u64>>,
    through: Op,
    /// Linearizable searches waiting for the index to reach their op.
    waiting: Vec<(Op, String, oneshot::Sender<Vec<u64>>)>,
}

impl WordIndex {
    fn index(&mut self, number: u64, note: &str) {
        for word in note.split_whitespace() {
            self.words.entry(word.to_lowercase()).or_default().push(number);
        }
    }

    fn hits(&self, word: &str) -> Vec<u64> {
        self.words.get(word).cloned().unwrap_or_default()
    }

    fn answer_ready(&mut self) {
        let through = self.through;
        let (ready, waiting) = std::mem::take(&mut self.waiting).into_iter().partition(|(at, _, _)| *at <= through);
        self.waiting = waiting;
        for (_, word, reply) in ready {
            let _ = reply.send(self.hits(&word));
        }
    }
}

impl Actor for WordIndex {
    type Context = Context<Self>;
}

impl Handler<Applied> for WordIndex {
    type Result = ();
    fn handle(&mut self, applied: Applied, _: &mut Context<Self>) {
        for op in &applied.ops {
            let number = op.result[..].try_into().map(u64::from_le_bytes).unwrap_or(u64::MAX);
            self.index(number, &String::from_utf8_lossy(&op.operation));
        }
        self.through = applied.through;
        self.answer_ready();
    }
}

impl Handler<Restored> for WordIndex {
    type Result = ();
    fn handle(&mut self, restored: Restored, _: &mut Context<Self>) {
        let mut notes = Notes::default();
        if notes.restore(&restored.state).is_ok() {
            self.words.clear();
            for (number, note) in notes.0.iter().enumerate() {
                self.index(number as u64, note);
            }
        }
        self.through = restored.op;
        self.answer_ready();
    }
}

impl Handler<RoleChanged> for WordIndex {
    type Result = ();
    fn handle(&mut self, changed: RoleChanged, _: &mut Context<Self>) {
        if changed.role.is_primary() {
            println!("{} {}: index is now on the primary of {}", self.replica.node, changed.group, changed.role.view());
        }
    }
}

/// Search this replica's index now (possibly stale).
#[derive(Message)]
#[rtype(result = "Vec<u64>")]
struct LocalSearch(String);

impl Handler<LocalSearch> for WordIndex {
    type Result = Vec<u64>;
    fn handle(&mut self, search: LocalSearch, _: &mut Context<Self>) -> Vec<u64> {
        self.hits(&search.0)
    }
}

/// Search once the index has applied `at` (the op a linearizable read saw).
#[derive(Message)]
#[rtype(result = "()")]
struct SearchAt(Op, String, oneshot::Sender<Vec<u64>>);

impl Handler<SearchAt> for WordIndex {
    type Result = ();
    fn handle(&mut self, SearchAt(at, word, reply): SearchAt, _: &mut Context<Self>) {
        self.waiting.push((at, word, reply));
        self.answer_ready();
    }
}

/// A linearizable search of `group` for `word`, answered by `node`'s index.
async fn search(
    client: &Client,
    node: &NodeHandle,
    group: GroupId,
    word: &str,
) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    let at = client.read(group, Bytes::new()).await?.op;
    let index = node.group_actor::<WordIndex>(group).await.ok_or("no index on that node")?;
    let (reply, answer) = oneshot::channel();
    index.send(SearchAt(at, word.to_string(), reply)).await?;
    Ok(tokio::time::timeout(Duration::from_secs(10), answer).await??)
}

const NOTES: [&str; 6] = [
    "cohort replicates each group with viewstamped replication",
    "a custom actor follows the applied ops of its group",
    "reads from a local index may be stale",
    "a read index makes them linearizable",
    "every replicated op is applied exactly once",
    "roles arrive typed with their view",
];

/// The example takes no flags but `--help`.
#[derive(clap::Parser)]
#[command(about = "A custom group actor: a word index that follows a group of notes, through a failover")]
struct Flags {}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Flags {} = clap::Parser::parse();
    actix_rt::System::new().block_on(async {
        let mut cluster = LocalCluster::builder(3)
            .group_kind("notes", |_| Box::new(Notes::default()))
            .group_actor("notes", |replica: &GroupReplica| WordIndex {
                replica: replica.clone(),
                words: HashMap::new(),
                through: Op(0),
                waiting: Vec::new(),
            })
            .groups("notes", [GroupId(0), GroupId(1)])
            .start()?;
        let client = cluster.client();
        for note in NOTES {
            client.write(GroupId(0), note).await?;
        }
        client.write(GroupId(1), "a second group has an index of its own").await?;
        for node in cluster.handles() {
            let index = node.group_actor::<WordIndex>(GroupId(0)).await.ok_or("no index")?;
            let local = index.send(LocalSearch("replicated".into())).await?;
            let linearizable = search(&client, &node, GroupId(0), "replicated").await?;
            println!("{}: local search for \"replicated\": {local:?}; linearizable: {linearizable:?}", node.node());
        }
        // The primary of group 0 (node 1) stops: another node's index hears it leads now.
        cluster.stop_node(NodeId(1));
        let client = cluster.client().timeout(Duration::from_secs(20));
        client.write(GroupId(0), "written after the failover").await?;
        let survivor = cluster.handle(NodeId(2)).ok_or("node 2 runs")?;
        let hits = search(&client, &survivor, GroupId(0), "failover").await?;
        println!("after failover, node:2 finds \"failover\" in notes {hits:?}");
        Ok(())
    })
}

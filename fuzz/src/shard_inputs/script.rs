//! Seed scripts for the `shard_inputs` target, written step by step in its
//! input format, so that fuzzing starts from runs that already commit,
//! snapshot, change view and restart instead of finding each from nothing.
//!
//! The byte layout of each step is the order in which `build` reads the
//! fields; [`seeds`] runs every script and checks that it reaches what its
//! name says, so a change of the layout cannot leave the seeds shallow
//! unnoticed.

use super::{Reached, STEP_CLIENT_REQUEST, STEP_CLUSTER_TURN, STEP_MESSAGE, STEP_RESTART, STEP_TICK, run};

/// Index of each hosted group in `topology::GROUPS`, as inputs name them.
const PRIMARY: u8 = 0;
const BACKUP: u8 = 1;
const LEARNER: u8 = 2;
const ASYNC_PRIMARY: u8 = 3;

/// A script under construction.
#[derive(Default)]
struct Script {
    bytes: Vec<u8>,
}

impl Script {
    /// `client`'s registration (request 1, no operation, H5) on the client port.
    fn client_register(&mut self, group: u8, client: u8) -> &mut Script {
        // group, client, request number 1, kind (even: write), length 0.
        self.bytes.extend_from_slice(&[STEP_CLIENT_REQUEST, group, client, 1, 0, 0]);
        self
    }

    /// A write of `client`'s request number `request` (2 to 7) on the client
    /// port; after its registration, numbered past the op it took.
    fn client_write(&mut self, group: u8, client: u8, request: u8) -> &mut Script {
        // group, client, request number, kind (even: write), length 1, the byte.
        self.bytes.extend_from_slice(&[STEP_CLIENT_REQUEST, group, client, request, 0, 1, b'w']);
        self
    }

    /// A Prepare of the replica's next op from the primary of view 0 (node 2,
    /// member 0), carrying a commit point one below it.
    fn prepare_next(&mut self, group: u8) -> &mut Script {
        // node 2, group, kind 0 (Prepare), incarnation as hosted, view = the
        // replica's, commit = its commit_max + 1, member 0, entry op = its
        // op + 1, entry view = the message's, client 1, length 1, the byte,
        // request number 1.
        self.bytes.extend_from_slice(&[STEP_MESSAGE, 2, group, 0, 0, 3, 4, 0, 3, 3, 1, 1, b'p', 1]);
        self
    }

    fn tick(&mut self, ticks: u8) -> &mut Script {
        self.bytes.extend_from_slice(&[STEP_TICK, ticks]);
        self
    }

    fn turn(&mut self) -> &mut Script {
        self.bytes.push(STEP_CLUSTER_TURN);
        self
    }

    fn restart(&mut self) -> &mut Script {
        self.bytes.extend_from_slice(&[STEP_RESTART, 0]);
        self
    }
}

fn primary_writes(script: &mut Script, group: u8, clients: u8) {
    // The clients register first (ops 1 and 2 at most), so their writes are
    // numbered from 3 (H5: past the op of the registration).
    for client in 1..=clients {
        script.client_register(group, client);
    }
    script.turn().tick(1).turn();
    for request in 3..=7 {
        for client in 1..=clients {
            script.client_write(group, client, request);
        }
        script.turn().tick(1).turn();
    }
}

fn backup_follows(script: &mut Script, group: u8) {
    for _ in 0..6 {
        script.prepare_next(group).turn().turn().tick(1).turn();
    }
}

/// The seed scripts, by name, each checked to reach what its name says.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut seeds = Vec::new();
    let mut check = |name: &'static str, script: Script, reaches: fn(&Reached) -> bool| {
        let reached = run(&script.bytes);
        assert!(reaches(&reached), "seed {name} does not reach what it should: {reached:?}");
        seeds.push((name, script.bytes));
    };

    let mut script = Script::default();
    primary_writes(&mut script, PRIMARY, 2);
    check("primary-commits-and-snapshots", script, |r| r.applied[0] >= 6 && r.snapshots > 0);

    let mut script = Script::default();
    primary_writes(&mut script, ASYNC_PRIMARY, 1);
    check("async-primary-commits", script, |r| r.applied[3] >= 3);

    let mut script = Script::default();
    backup_follows(&mut script, BACKUP);
    check("backup-follows", script, |r| r.applied[1] >= 3);

    let mut script = Script::default();
    backup_follows(&mut script, LEARNER);
    check("learner-follows", script, |r| r.applied[2] >= 3);

    // No heartbeats from the backup group's primary: it times out, and as
    // the primary of view 1 it collects DoViewChanges and takes over.
    let mut script = Script::default();
    backup_follows(&mut script, BACKUP);
    for _ in 0..6 {
        script.tick(3).turn().turn();
    }
    check("backup-takes-over", script, |r| r.views[1] >= 1);

    let mut script = Script::default();
    primary_writes(&mut script, PRIMARY, 1);
    script.restart().turn().tick(4).turn().turn();
    primary_writes(&mut script, PRIMARY, 1);
    check("restart-and-go-on", script, |r| r.restarts == 1 && r.applied[0] >= 6);

    seeds
}

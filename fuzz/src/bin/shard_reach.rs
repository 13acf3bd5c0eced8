//! What a `shard_inputs` corpus reaches: runs every input of a directory
//! (default `fuzz/corpus/shard_inputs`) through the driver, natively, and
//! prints totals and maxima, so a recorded run can say how deep it went.

use std::path::PathBuf;

fn main() {
    let dir = std::env::args().nth(1).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("fuzz/corpus/shard_inputs"));
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) => {
            eprintln!("cannot read {}: {error}", dir.display());
            std::process::exit(1);
        }
    };
    let mut total = cohort_fuzz::shard_inputs::Reached::default();
    let mut inputs = 0u64;
    let mut reached_commit = 0u64;
    let mut reached_view_change = 0u64;
    for entry in entries.flatten() {
        let Ok(data) = std::fs::read(entry.path()) else { continue };
        let reached = cohort_fuzz::shard_inputs::run(&data);
        inputs += 1;
        reached_commit += u64::from(reached.applied.iter().any(|op| *op > 0));
        reached_view_change += u64::from(reached.views.iter().any(|view| *view > 0));
        total.steps += reached.steps;
        total.delivered += reached.delivered;
        total.undecodable += reached.undecodable;
        total.refused.add(&reached.refused);
        total.snapshots += reached.snapshots;
        total.restarts += reached.restarts;
        for index in 0..total.applied.len() {
            total.applied[index] = total.applied[index].max(reached.applied[index]);
            total.views[index] = total.views[index].max(reached.views[index]);
        }
    }
    println!("inputs {inputs}: {reached_commit} applied an op, {reached_view_change} changed view");
    println!("steps {}, delivered {}, undecodable {}", total.steps, total.delivered, total.undecodable);
    println!("refused by the shard: {:?}", total.refused);
    println!("snapshots {}, restarts {}", total.snapshots, total.restarts);
    println!("highest applied op per group {:?}, highest view per group {:?}", total.applied, total.views);
}

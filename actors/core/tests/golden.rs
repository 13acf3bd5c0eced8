//! Golden-file tests of the pure quorum algorithms: commit-point counting and
//! the view-change log choice. The expected values live in `golden/*.txt`,
//! one case per line, so a change in the math shows up as a diff of a table.
//! Run with `UPDATE_GOLDEN=1` to rewrite the expectations after a deliberate change.

use cohort_core::quorum::{LogSummary, quorum_op, select_log};
use cohort_messages::{MemberIndex, Op, View};

fn numbers(text: &str) -> Vec<u64> {
    text.split_whitespace().map(|n| n.parse().expect("a number")).collect()
}

fn run_golden(file: &str, compute: impl Fn(&str) -> String) {
    let path = format!("{}/tests/golden/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("golden file");
    let mut rewritten = String::new();
    let mut mismatches = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            rewritten.push_str(line);
            rewritten.push('\n');
            continue;
        }
        let (input, expected) = line.rsplit_once('|').expect("input | expected");
        let actual = compute(input);
        if actual.trim() != expected.trim() {
            mismatches.push(format!("{input}| expected {} got {actual}", expected.trim()));
        }
        rewritten.push_str(&format!("{input}| {actual}\n"));
    }
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, rewritten).expect("rewrite golden file");
        return;
    }
    assert!(mismatches.is_empty(), "{file}:\n{}", mismatches.join("\n"));
}

#[test]
fn golden_quorum_op() {
    run_golden("quorum_op.txt", |input| {
        let (shape, held) = input.split_once('|').expect("members q2 | held");
        let shape = numbers(shape);
        let held: Vec<Op> = numbers(held).into_iter().map(Op).collect();
        assert_eq!(held.len() as u64, shape[0]);
        quorum_op(&held, shape[1] as usize).0.to_string()
    });
}

#[test]
fn golden_select_log() {
    run_golden("select_log.txt", |input| {
        let (me, logs) = input.split_once('|').expect("me | logs");
        let me = MemberIndex(me.trim().parse().expect("me"));
        let logs: Vec<LogSummary> = logs
            .split_whitespace()
            .map(|log| {
                let parts: Vec<u64> = log.split(':').map(|p| p.parse().expect("a number")).collect();
                LogSummary {
                    member: MemberIndex(parts[0] as u8),
                    log_view: View(parts[1] as u32),
                    op: Op(parts[2]),
                    commit: Op(parts[3]),
                }
            })
            .collect();
        let (best, commit) = select_log(&logs, me);
        format!("{} {}", best.0, commit.0)
    });
}

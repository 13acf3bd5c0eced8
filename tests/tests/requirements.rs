//! Every requirement id named in the code has a row in `docs/requirements.md`.
//!
//! The scan reads every `*.rs` file under the workspace's source directories
//! ([`SOURCE_DIRS`], skipping `target/`) with a small tokenizer instead of a
//! regex. A *word* is a maximal run of ASCII letters, digits and `_`; a word
//! that starts with a digit is a number (`0x9E37_79B9`, `0x00c0_4a27`) and
//! never holds an id. Within a word, split at `_`:
//!
//! - a part that is a family letter followed by decimal digits is an id:
//!   `R17`, `(R17,`, `"P1 broken"` and `S1-S4` name ids; `CRC32C`, `U64`
//!   and `0xC1` do not;
//! - in a function name (the word after `fn`), the leading lowercase parts
//!   such as `r17_` or `q4_p1_` are ids too: a test is named after the rule
//!   it checks. Elsewhere lowercase parts (`let s1_view`, `latency_p50_us`)
//!   are ordinary names;
//! - digits that start with `0` are not an id number (ids count from 1), so
//!   `T0` or `P0` in prose is no id.
//!
//! The test fails for every id without a row (`| <id> |` at the start of a
//! line), naming the first file:line that mentions it, and for every id whose
//! number is outside its family's range: that names a rule that does not
//! exist. [`NOT_IDS`] lists the id-shaped words that are something else.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// The requirement families: letter and highest number (each starts at 1).
const FAMILIES: [(char, u32); 14] = [
    ('R', 32),
    ('V', 7),
    ('Q', 4),
    ('P', 4),
    ('M', 6),
    ('S', 5),
    ('T', 6),
    ('F', 4),
    ('K', 7),
    ('C', 5),
    ('Z', 6),
    ('O', 6),
    ('H', 5),
    ('D', 5),
];

/// Workspace directories whose `*.rs` files are scanned.
const SOURCE_DIRS: [&str; 6] = ["messages", "actors", "runtime", "tests", "examples", "fuzz"];

/// The index of requirement ids, relative to the workspace root.
const REQUIREMENTS_DOC: &str = "docs/requirements.md";

/// Id-shaped words that are not requirement ids, with the reason. The scan
/// found none of them in the code when this test was written; they are here
/// because latency percentiles, which benchmarks report, are spelled like an
/// out-of-range P id and would otherwise fail the range check.
const NOT_IDS: [(&str, &str); 5] = [
    ("P50", "latency percentile"),
    ("P90", "latency percentile"),
    ("P95", "latency percentile"),
    ("P99", "latency percentile"),
    ("P999", "latency percentile"),
];

/// A requirement id such as R17: a family letter and a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Id {
    family: char,
    number: u64,
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.family, self.number)
    }
}

impl Id {
    /// An id written as a family letter (uppercase) followed by decimal
    /// digits that do not start with `0`, e.g. `R17`; any number parses,
    /// in range or not.
    fn parse(word: &str) -> Option<Id> {
        let mut chars = word.chars();
        let family = chars.next()?;
        let digits = chars.as_str();
        if family_max(family).is_none() || digits.is_empty() || digits.starts_with('0') {
            return None;
        }
        if !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        // A number too long for u64 is out of every range all the same.
        Some(Id { family, number: digits.parse().unwrap_or(u64::MAX) })
    }

    /// The same for a lowercase test-name prefix such as `r17`.
    fn parse_lowercase(word: &str) -> Option<Id> {
        let first = word.chars().next()?;
        if !first.is_ascii_lowercase() {
            return None;
        }
        Id::parse(&word.to_ascii_uppercase())
    }

    fn in_range(self) -> bool {
        family_max(self.family).is_some_and(|max| (1..=u64::from(max)).contains(&self.number))
    }

    fn allowed_as_not_an_id(self) -> bool {
        let text = self.to_string();
        NOT_IDS.iter().any(|(word, _reason)| *word == text)
    }
}

/// The highest number of `family`, if it is a family letter.
fn family_max(family: char) -> Option<u32> {
    FAMILIES.iter().find(|(letter, _)| *letter == family).map(|(_, max)| *max)
}

/// The words of `line`: maximal runs of ASCII letters, digits and `_`.
fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|word| !word.is_empty())
}

/// Every id named in `text`, with its 1-based line, in order (see the module
/// docs for the token rules). Words in [`NOT_IDS`] are left out.
fn scan(text: &str) -> Vec<(Id, usize)> {
    let mut found = Vec::new();
    let mut after_fn = false;
    for (index, line) in text.lines().enumerate() {
        for word in words(line) {
            let is_fn_name = std::mem::replace(&mut after_fn, word == "fn");
            if word.starts_with(|c: char| c.is_ascii_digit()) {
                continue; // a number literal, hex included
            }
            let parts: Vec<&str> = word.split('_').collect();
            let mut ids: Vec<Id> = parts.iter().filter_map(|part| Id::parse(part)).collect();
            if is_fn_name {
                // Leading `r17_`-style parts, each followed by more of the name.
                let leading = parts[..parts.len() - 1].iter().map_while(|part| Id::parse_lowercase(part));
                ids.extend(leading);
            }
            found.extend(ids.into_iter().filter(|id| !id.allowed_as_not_an_id()).map(|id| (id, index + 1)));
        }
    }
    found
}

/// The ids that have a table row in `doc` (lines starting with `| <id> |`),
/// with their lines.
fn table_rows(doc: &str) -> Vec<(Id, usize)> {
    doc.lines()
        .enumerate()
        .filter_map(|(index, line)| {
            let rest = line.strip_prefix('|')?;
            let (cell, _) = rest.split_once('|')?;
            Id::parse(cell.trim()).map(|id| (id, index + 1))
        })
        .collect()
}

/// Add the ids of `text` (file `name`) to `first`, each with the first
/// place it is named.
fn record_mentions(name: &str, text: &str, first: &mut BTreeMap<Id, String>) {
    for (id, line) in scan(text) {
        first.entry(id).or_insert_with(|| format!("{name}:{line}"));
    }
}

/// What is wrong with the ids named in code: one line per id that is out of
/// range or has no row among `rows`.
fn code_problems(first: &BTreeMap<Id, String>, rows: &BTreeSet<Id>) -> Vec<String> {
    first
        .iter()
        .filter_map(|(id, at)| {
            let max = family_max(id.family).expect("scanned ids are of a family");
            if !id.in_range() {
                let family = id.family;
                Some(format!("{id} ({at}): {family}1–{family}{max} are the only {family} ids; no such rule"))
            } else if !rows.contains(id) {
                Some(format!("{id} ({at}): no row `| {id} |` in {REQUIREMENTS_DOC}"))
            } else {
                None
            }
        })
        .collect()
}

/// What is wrong with the table itself: rows for ids out of range, and ids
/// with more than one row.
fn row_problems(rows: &[(Id, usize)]) -> Vec<String> {
    let mut seen = BTreeMap::new();
    let mut problems = Vec::new();
    for (id, line) in rows {
        if !id.in_range() {
            problems.push(format!("{REQUIREMENTS_DOC}:{line}: a row for {id}, which is outside its family's range"));
        }
        if let Some(earlier) = seen.insert(*id, *line) {
            problems.push(format!("{REQUIREMENTS_DOC}:{line}: a second row for {id} (first at line {earlier})"));
        }
    }
    problems
}

/// Every `*.rs` file under `dir`, in a stable order, skipping `target/`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|error| panic!("read {}: {error}", dir.display()));
    let mut paths: Vec<PathBuf> = entries.map(|entry| entry.expect("a directory entry").path()).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name != "target") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            out.push(path);
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the cohort-sim package sits in the workspace").to_path_buf()
}

#[test]
fn every_requirement_id_in_the_code_has_a_row_in_docs_requirements() {
    let root = workspace_root();
    let doc_path = root.join(REQUIREMENTS_DOC);
    let doc = std::fs::read_to_string(&doc_path).unwrap_or_else(|error| panic!("read {}: {error}", doc_path.display()));
    let rows = table_rows(&doc);
    let mut problems = row_problems(&rows);
    let row_ids: BTreeSet<Id> = rows.iter().map(|(id, _)| *id).collect();

    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        let dir = root.join(dir);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
    }
    assert!(!files.is_empty(), "no *.rs file under {SOURCE_DIRS:?} of {}", root.display());
    let mut first = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|error| panic!("read {}: {error}", file.display()));
        let name = file.strip_prefix(&root).expect("under the root").to_string_lossy().replace('\\', "/");
        record_mentions(&name, &text, &mut first);
    }
    assert!(
        !first.is_empty(),
        "the scan found no requirement id at all in {} files: is the tokenizer broken?",
        files.len()
    );
    problems.extend(code_problems(&first, &row_ids));
    println!(
        "{} files, {} distinct ids named in code, {} rows in {REQUIREMENTS_DOC}",
        files.len(),
        first.len(),
        row_ids.len()
    );
    assert!(
        problems.is_empty(),
        "{} requirement id problem(s); add a row to {REQUIREMENTS_DOC} or fix the id:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The check bites: on a small source text and table, it reports exactly
/// the ids without a row and the id out of range, and nothing else.
#[test]
fn the_scan_reports_ids_without_a_row_and_ids_out_of_range() {
    // Spelled in two parts, so that this file names no rule that does not exist.
    let past_range = concat!("R", "33");
    let code = format!(
        "//! Batched Commits (R17, Q2).\n\
         fn s1_s3_sessions_and_policies() {{}}\n\
         const LATENCY_P99_NS: u64 = 0xC1; // {past_range}\n\
         let s1_view = CRC32C + U64 + T0 + latency_p50_us; fn helper_s1() {{}} fn s1() {{}}\n\
         \"P1 broken\" S1-S4\n"
    );
    let table = "| id | rule |\n| --- | --- |\n| R17 | rule |\n| S1 | rule |\n| P1 | rule |\n| S4 | rule |\n";
    let rows: BTreeSet<Id> = table_rows(table).into_iter().map(|(id, _)| id).collect();
    assert_eq!(rows.len(), 4, "the header row is no id row");

    let mut first = BTreeMap::new();
    record_mentions("example.rs", &code, &mut first);
    let named: Vec<String> = first.keys().map(Id::to_string).collect();
    assert_eq!(named, ["P1", "Q2", "R17", past_range, "S1", "S3", "S4"]);
    assert_eq!(first[&Id { family: 'S', number: 1 }], "example.rs:2", "the first place wins");
    assert_eq!(
        code_problems(&first, &rows),
        [
            format!("Q2 (example.rs:1): no row `| Q2 |` in {REQUIREMENTS_DOC}"),
            format!("{past_range} (example.rs:3): R1–R32 are the only R ids; no such rule"),
            format!("S3 (example.rs:2): no row `| S3 |` in {REQUIREMENTS_DOC}"),
        ]
    );

    let bad_table = format!("| R17 | rule |\n| {past_range} | rule |\n| R17 | again |\n");
    assert_eq!(
        row_problems(&table_rows(&bad_table)),
        [
            format!("{REQUIREMENTS_DOC}:2: a row for {past_range}, which is outside its family's range"),
            format!("{REQUIREMENTS_DOC}:3: a second row for R17 (first at line 1)"),
        ]
    );
}

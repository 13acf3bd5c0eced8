//! `cohort certs`: a cluster's CA and its certificates (T1, T2), so that a
//! secure cluster takes two commands: `cohort certs init --dir D --nodes N`
//! writes the CA, a random cluster id and every node's certificate (plus
//! one config snippet per node to paste), then each node runs `cohort node`.
//! `cohort certs node` and `cohort certs client` add one identity later,
//! signed by the same CA (the CA key must be in the directory).
//!
//! Every file is written before a line is printed: the command returns its
//! answer as text, so a reader that stops early (`cohort certs init … |
//! head`) cannot leave later certificates unwritten (see [`super::output`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cohort_actors::{Authority, CA_KEY_FILE, CertsError};
use cohort_client::format_cluster_id;
use cohort_messages::NodeId;

/// What `cohort certs` was asked to do.
#[derive(Clone, Debug)]
pub(crate) enum CertsAction {
    /// A new CA and cluster id in `dir`, and certificates for nodes 1..=nodes.
    Init {
        /// The directory (created if missing; refused if it holds a CA).
        dir: PathBuf,
        /// Node certificates to make at once.
        nodes: u64,
    },
    /// One node's certificate.
    Node {
        /// The CA's directory.
        dir: PathBuf,
        /// The node id.
        id: u64,
    },
    /// One client's certificate (for the client port).
    Client {
        /// The CA's directory.
        dir: PathBuf,
        /// The client's name (letters, digits, '-').
        name: String,
    },
}

/// Run `action`; the answer is what was written, to print once every file
/// is; the error names the file.
pub(crate) fn certs_command(action: &CertsAction) -> Result<String, CertsError> {
    let mut out = String::new();
    match action {
        CertsAction::Init { dir, nodes } => {
            let authority = Authority::init(dir)?;
            let _ = writeln!(
                out,
                "cluster id {} (in {})",
                format_cluster_id(authority.cluster()),
                dir.join("cluster-id").display()
            );
            let _ = writeln!(
                out,
                "CA certificate {}, key {}",
                dir.join("ca.pem").display(),
                dir.join(CA_KEY_FILE).display()
            );
            for id in 1..=*nodes {
                write_node(&authority, dir, id, &mut out)?;
            }
            if *nodes > 0 {
                let _ = writeln!(
                    out,
                    "next: copy ca.pem and each node's .pem/.key to its host, add the snippet above to its config, \
                     and run `cohort node --config FILE`; keep {CA_KEY_FILE} off the nodes"
                );
            }
        }
        CertsAction::Node { dir, id } => write_node(&Authority::load(dir)?, dir, *id, &mut out)?,
        CertsAction::Client { dir, name } => {
            let authority = Authority::load(dir)?;
            let files = authority.write_client(dir, name)?;
            let _ = writeln!(out, "client {name}: certificate {}, key {}", files.cert.display(), files.key.display());
        }
    }
    Ok(out.trim_end().to_string())
}

fn write_node(authority: &Authority, dir: &Path, id: u64, out: &mut String) -> Result<(), CertsError> {
    if id == 0 {
        return Err(CertsError::Content { path: dir.to_path_buf(), reason: "node id 0 is not a node".into() });
    }
    let files = authority.write_node(dir, NodeId(id))?;
    let _ = writeln!(out, "node {id}: certificate {}, key {}; its config:", files.cert.display(), files.key.display());
    let _ = writeln!(out, "    [node]");
    let _ = writeln!(out, "    cluster_id = \"{}\"", format_cluster_id(authority.cluster()));
    let _ = writeln!(out, "    id = {id}");
    let _ = writeln!(out, "    [tls]");
    let _ = writeln!(out, "    ca = \"{}\"", files.ca.display());
    let _ = writeln!(out, "    cert = \"{}\"", files.cert.display());
    let _ = writeln!(out, "    key = \"{}\"", files.key.display());
    Ok(())
}

//! `cohort certs`: a cluster's CA and its certificates (T1, T2), so that a
//! secure cluster takes two commands: `cohort certs init --dir D --nodes N`
//! writes the CA, a random cluster id and every node's certificate (plus
//! one config snippet per node to paste), then each node runs `cohort node`.
//! `cohort certs node` and `cohort certs client` add one identity later,
//! signed by the same CA (the CA key must be in the directory).

use std::path::{Path, PathBuf};

use cohort_actors::certs::{Authority, CA_KEY_FILE, CertsError, cluster_hex};
use cohort_messages::NodeId;

/// What `cohort certs` was asked to do.
#[derive(Clone, Debug)]
pub enum CertsAction {
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

/// Run `action`, printing what was written; the error names the file.
pub fn certs_command(action: &CertsAction) -> Result<(), CertsError> {
    match action {
        CertsAction::Init { dir, nodes } => {
            let authority = Authority::init(dir)?;
            println!("cluster id {} (in {})", cluster_hex(authority.cluster()), dir.join("cluster-id").display());
            println!("CA certificate {}, key {}", dir.join("ca.pem").display(), dir.join(CA_KEY_FILE).display());
            for id in 1..=*nodes {
                write_node(&authority, dir, id)?;
            }
            if *nodes > 0 {
                println!(
                    "next: copy ca.pem and each node's .pem/.key to its host, add the snippet above to its config, \
                     and run `cohort node --config FILE`; keep {} off the nodes",
                    CA_KEY_FILE
                );
            }
            Ok(())
        }
        CertsAction::Node { dir, id } => write_node(&Authority::load(dir)?, dir, *id),
        CertsAction::Client { dir, name } => {
            let authority = Authority::load(dir)?;
            let files = authority.write_client(dir, name)?;
            println!("client {name}: certificate {}, key {}", files.cert.display(), files.key.display());
            Ok(())
        }
    }
}

fn write_node(authority: &Authority, dir: &Path, id: u64) -> Result<(), CertsError> {
    if id == 0 {
        return Err(CertsError::Content { path: dir.to_path_buf(), reason: "node id 0 is not a node".into() });
    }
    let files = authority.write_node(dir, NodeId(id))?;
    println!("node {id}: certificate {}, key {}; its config:", files.cert.display(), files.key.display());
    println!("    [node]");
    println!("    cluster_id = \"{}\"", cluster_hex(authority.cluster()));
    println!("    id = {id}");
    println!("    [tls]");
    println!("    ca = \"{}\"", files.ca.display());
    println!("    cert = \"{}\"", files.cert.display());
    println!("    key = \"{}\"", files.key.display());
    Ok(())
}

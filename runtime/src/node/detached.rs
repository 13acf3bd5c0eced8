//! A node in an actix System of its own, for hosts that do not run actix.
//!
//! [`super::NodeBuilder::start`] must be called inside an actix System, which
//! suits hosts built on actix. A host on plain tokio, or with a synchronous
//! `main`, calls [`super::NodeBuilder::start_detached`] instead: cohort starts
//! a thread with its own System, starts the node there and hands back a
//! [`DetachedNode`]. Its [`NodeHandle`] and a [`crate::client::Client`] work
//! from any tokio runtime: they only send to the node's actors and await
//! answers.

use std::net::SocketAddr;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use super::{NodeBuilder, NodeError, NodeHandle};

/// A node running in its own thread and actix System. Dropping it stops the
/// node and joins the thread.
///
/// ```no_run
/// use cohort_runtime::prelude::*;
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let node = NodeBuilder::new(ClusterId(7), NodeId(1))
///         .tls(TlsFiles {
///             ca: "/etc/myapp/cohort/ca.pem".into(),
///             cert: "/etc/myapp/cohort/node-1.pem".into(),
///             key: "/etc/myapp/cohort/node-1.key".into(),
///         })
///         .listen("127.0.0.1:7100".parse()?)
///         .data_dir("/tmp/myapp-node-1")
///         .state_machine(|_| Box::new(Register::default()))
///         .group(GroupPlacement::new(GroupId(0), vec![NodeId(1)]))
///         .start_detached()?;
///     Client::new([node.handle()]).write(GroupId(0), "hello").await?;
///     node.stop();
///     Ok(())
/// }
/// ```
pub struct DetachedNode {
    handle: NodeHandle,
    listen: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl DetachedNode {
    /// A handle for submitting requests, usable from any tokio runtime.
    pub fn handle(&self) -> NodeHandle {
        self.handle.clone()
    }

    /// The bound listen address.
    pub fn listen_address(&self) -> SocketAddr {
        self.listen
    }

    /// Stop the node ([`super::Node::stop`]) and its System, and wait for both.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for DetachedNode {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Start `builder`'s node on a new thread with its own actix System.
pub(super) fn start(builder: NodeBuilder) -> Result<DetachedNode, NodeError> {
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(format!("cohort-system-{}", builder.node.0))
        .spawn(move || {
            actix_rt::System::new().block_on(async move {
                match builder.start() {
                    Ok(node) => {
                        let _ = started_tx.send(Ok((node.handle(), node.listen_address())));
                        // Stop when told to, or when the DetachedNode is gone.
                        let _ = stopped.await;
                        node.stop();
                    }
                    Err(error) => {
                        let _ = started_tx.send(Err(error));
                    }
                }
            });
        })
        .map_err(|error| NodeError::Config(format!("cannot start the node's thread: {error}")))?;
    match started_rx.recv() {
        Ok(Ok((handle, listen))) => Ok(DetachedNode { handle, listen, stop: Some(stop), thread: Some(thread) }),
        Ok(Err(error)) => {
            let _ = thread.join();
            Err(error)
        }
        Err(_) => {
            let _ = thread.join();
            Err(NodeError::Config("the node's thread ended before the node started".into()))
        }
    }
}

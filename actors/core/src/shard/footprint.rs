//! T5: a shard measures its [`Footprint`], what it holds that peer input
//! could grow (see [`crate::footprint`] for why and for the bounds).

use super::Shard;
use crate::footprint::Footprint;

impl Shard {
    /// T5: what this shard holds that input could grow (see the module docs).
    pub fn footprint(&self) -> Footprint {
        let queued = self.out.queued();
        let mut footprint = Footprint {
            held_sends: queued.held_sends,
            queued_commits: queued.queued_commits,
            queued_replies: queued.queued_replies,
            ..Footprint::default()
        };
        for replica in self.replicas() {
            let entries = (replica.log.op().0 - replica.log.base().0) as usize;
            footprint.log_entries_max = footprint.log_entries_max.max(entries);
            footprint.log_bytes += replica.log.size_bytes();
            footprint.request_queue_max = footprint.request_queue_max.max(replica.request_queue.len());
            // D2: requests waiting for a state machine away, bounded alike.
            footprint.request_queue_max = footprint.request_queue_max.max(replica.waiting_for_state.len());
            let election = replica.election().map_or(0, |election| election.dvcs.iter().flatten().count());
            let dvcs = election + replica.early_dvcs.len();
            footprint.do_view_changes_max = footprint.do_view_changes_max.max(dvcs);
            footprint.served_tail_bytes += replica.served_tail_bytes();
            footprint.backlog_bytes += replica.backlog_size_bytes();
            if let Some(transfer) = &replica.state_transfer {
                footprint.state_transfer_bytes += transfer.data.len() as u64;
                // D3: a stream's size is the disk's business; only a whole
                // snapshot is held here, and capped.
                if transfer.stream.is_none() {
                    footprint.state_transfer_declared_max_bytes =
                        footprint.state_transfer_declared_max_bytes.max(transfer.total_size_bytes);
                }
            }
        }
        debug_assert_eq!(
            footprint.backlog_bytes,
            self.out.backlog_size_bytes(),
            "D1: the ledger is what backlogs hold"
        );
        footprint
    }
}

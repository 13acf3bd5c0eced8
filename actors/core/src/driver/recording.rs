//! A driver's inputs and turns as data, to record a real shell's run and
//! replay it through another shell's path.
//!
//! The node's shard actor and the simulator both feed a [`super::ShardDriver`]
//! and carry out its turns. A recording of what one of them handed the
//! driver, and of the turns it got back, lets a test hold the other to the
//! same outputs: [`replay`] drives a driver built the other way through the
//! same inputs and returns its turns.

use cohort_messages::seal::Seal;
use cohort_messages::{GroupId, NodeId, Op, Request};

use super::{LinkStatus, Links, PeerInput, ShardDriver, Turn};
use crate::effect::{FlushId, WaitId};
use crate::replica::GroupSpec;
use crate::state_machine::StateMachine;
use crate::storage::RecoveredGroup;

/// One call a shell made on its driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// [`ShardDriver::set_pair_identity`].
    PairIdentity {
        /// The shard's index on its node.
        shard_index: u16,
        /// The process's epoch.
        epoch: u64,
    },
    /// [`ShardDriver::start_at`].
    StartAt {
        /// The clock's tick.
        now_tick: u64,
    },
    /// [`ShardDriver::create_group`] (the state machine comes from the replayer).
    Create {
        /// The spec.
        spec: GroupSpec,
    },
    /// [`ShardDriver::join_group`] (H1).
    Join {
        /// The spec.
        spec: GroupSpec,
    },
    /// [`ShardDriver::recover_group`].
    Recover {
        /// The spec.
        spec: GroupSpec,
        /// What storage held.
        recovered: RecoveredGroup,
    },
    /// [`ShardDriver::remove_group`].
    Remove {
        /// The group.
        group: GroupId,
    },
    /// [`ShardDriver::propose_seal`].
    ProposeSeal {
        /// The group.
        group: GroupId,
        /// The seal.
        seal: Seal,
    },
    /// [`ShardDriver::transfer_primary`].
    TransferPrimary {
        /// The group.
        group: GroupId,
        /// The new primary.
        to: NodeId,
    },
    /// [`ShardDriver::switch_incarnation`].
    Switch {
        /// The group.
        group: GroupId,
    },
    /// [`ShardDriver::switch_incarnation_as_learner`].
    SwitchAsLearner {
        /// The group.
        group: GroupId,
        /// The seal.
        seal: Seal,
        /// The learners.
        learners: Vec<NodeId>,
    },
    /// [`ShardDriver::set_learners`].
    SetLearners {
        /// The group.
        group: GroupId,
        /// The learners.
        learners: Vec<NodeId>,
    },
    /// [`ShardDriver::on_clock`].
    Clock {
        /// The clock's tick.
        now_tick: u64,
    },
    /// [`ShardDriver::on_peer`].
    Peer {
        /// The input.
        input: PeerInput,
    },
    /// [`ShardDriver::on_submit`].
    Submit {
        /// The request.
        request: Request,
    },
    /// [`ShardDriver::on_flushed`].
    Flushed {
        /// The flush.
        id: FlushId,
    },
    /// [`ShardDriver::on_applied`] (D2): what the work did, not the state
    /// machine; a replay hands back the one its own turn lent.
    Applied {
        /// The group.
        group: GroupId,
        /// The job.
        id: crate::effect::ApplyId,
        /// What it did.
        done: crate::state_machine::Done,
    },
    /// [`ShardDriver::on_superblock_failed`].
    SuperblockFailed {
        /// The group.
        group: GroupId,
    },
    /// [`ShardDriver::wait_quorum`].
    WaitQuorum {
        /// The group.
        group: GroupId,
        /// The op.
        op: Op,
        /// The quorum.
        quorum: usize,
        /// The timeout.
        timeout_ticks: u64,
    },
    /// [`ShardDriver::cancel_wait`].
    CancelWait {
        /// The wait.
        wait: WaitId,
    },
    /// [`ShardDriver::input_done`].
    Done {
        /// When, on the shell's clock.
        at_micros: u64,
    },
    /// [`ShardDriver::end_turn`], with what the links said of each peer.
    EndTurn {
        /// Each peer's link, in peer order.
        links: Vec<(NodeId, Option<LinkStatus>)>,
    },
}

/// One entry of a recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// A call.
    Input(Input),
    /// The turn an [`Input::EndTurn`] returned.
    Turn(Turn),
}

/// The links as an [`Input::EndTurn`] recorded them.
struct RecordedLinks<'a>(&'a [(NodeId, Option<LinkStatus>)]);

impl Links for RecordedLinks<'_> {
    fn status(&self, peer: NodeId) -> Option<LinkStatus> {
        self.0.iter().find(|(node, _)| *node == peer).and_then(|(_, status)| *status)
    }
}

/// D2: a job a replayed turn lent: its state machine and its work.
type LentRun = (Box<dyn StateMachine>, crate::state_machine::Work);

/// Feed the inputs of `recording` to `driver`, in order, and return the
/// turns it ended (one per [`Input::EndTurn`]). Groups it hosts get their
/// state machine from `state_machine`; a change the recording saw refused
/// is refused again (the answers are not compared here: the turns are).
pub fn replay(
    driver: &mut ShardDriver,
    recording: &[Recorded],
    state_machine: &mut dyn FnMut(&GroupSpec) -> Box<dyn StateMachine>,
) -> Vec<Turn> {
    let mut turns = Vec::new();
    // D2: the state machines the replay's turns lent, until their run's
    // recorded return.
    let mut lent: std::collections::HashMap<crate::effect::ApplyId, LentRun> = std::collections::HashMap::new();
    for entry in recording {
        let Recorded::Input(input) = entry else { continue };
        match input.clone() {
            Input::PairIdentity { shard_index, epoch } => driver.set_pair_identity(shard_index, epoch),
            Input::StartAt { now_tick } => driver.start_at(now_tick),
            Input::Create { spec } => {
                let state = state_machine(&spec);
                let _ = driver.create_group(spec, state);
            }
            Input::Join { spec } => {
                let state = state_machine(&spec);
                let _ = driver.join_group(spec, state);
            }
            Input::Recover { spec, recovered } => {
                let state = state_machine(&spec);
                let _ = driver.recover_group(spec, state, recovered);
            }
            Input::Remove { group } => {
                driver.remove_group(group);
            }
            Input::ProposeSeal { group, seal } => {
                let _ = driver.propose_seal(group, seal);
            }
            Input::TransferPrimary { group, to } => {
                let _ = driver.transfer_primary(group, to);
            }
            Input::Switch { group } => {
                let _ = driver.switch_incarnation(group);
            }
            Input::SwitchAsLearner { group, seal, learners } => {
                let _ = driver.switch_incarnation_as_learner(group, &seal, learners);
            }
            Input::SetLearners { group, learners } => {
                let _ = driver.set_learners(group, learners);
            }
            Input::Clock { now_tick } => {
                driver.on_clock(now_tick);
            }
            Input::Peer { input } => driver.on_peer(input),
            Input::Submit { request } => driver.on_submit(request),
            Input::Flushed { id } => driver.on_flushed(id),
            Input::Applied { group, id, done } => {
                // The worker's work, on the replay's own state machine (so
                // that later reads see it); what it recorded goes back.
                if let Some((mut state, work)) = lent.remove(&id) {
                    let _ = crate::state_machine::work_on(state.as_mut(), &work);
                    driver.on_applied(group, id, state, done);
                }
            }
            Input::SuperblockFailed { group } => driver.on_superblock_failed(group),
            Input::WaitQuorum { group, op, quorum, timeout_ticks } => {
                driver.wait_quorum(group, op, quorum, timeout_ticks);
            }
            Input::CancelWait { wait } => {
                driver.cancel_wait(wait);
            }
            Input::Done { at_micros } => {
                driver.input_done(at_micros);
            }
            Input::EndTurn { links } => {
                let mut turn = driver.end_turn(&RecordedLinks(&links));
                for job in &mut turn.applies {
                    if let Some(state) = job.state.take() {
                        lent.insert(job.id, (state, job.work.clone()));
                    }
                }
                turns.push(turn);
            }
        }
    }
    turns
}

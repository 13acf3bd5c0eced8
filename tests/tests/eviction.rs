//! H5: the client table under eviction, on the simulator's harness.
//!
//! A group's client table holds at most `clients_max` clients and evicts
//! the least recently active one; a client it does not know may only start
//! at request 1, so that a retry from an evicted client is refused instead
//! of applied twice (actors/core/src/client_table.rs). The eviction
//! workload (`--clients C --clients-max M`, C > M) found that this did not
//! hold for request 1 itself: a retry of a client's first write, once the
//! client was evicted, was indistinguishable from a new client's first
//! write and was applied again. Request 1 is now a registration that
//! applies nothing, and writes are numbered after its op (see `cohort_core::client`
//! and docs/simulator.md, "The eviction workload"); the test below sets the
//! old failure up by hand.

use cohort_core::client_table::is_registration;
use cohort_messages::{GroupId, RequestNumber};
use cohort_sim::kv::KvOp;
use cohort_sim::{FaultProfile, Sim, SimConfig};

const G: GroupId = GroupId(0);
/// Values written here (distinct from the random clients').
const VALUE_BASE: u64 = 0xE71C_0000_0000;

/// A writer registers and its first write (request 2) is applied and
/// answered; two other writers register and write, which evicts it from a
/// table of two; then its first write arrives again (a late retry, or a
/// copy the network held). It must be refused as unknown, not applied a
/// second time.
#[test]
fn h5_a_retry_of_a_first_write_after_eviction_is_not_applied_again() {
    for seed in 0..5 {
        let mut config = SimConfig::new(seed);
        config.groups = 1;
        config.clients = 0;
        config.profile = Some(FaultProfile::Partitions);
        config.core.clients_max = 2;
        let mut sim = Sim::new(config);
        for _ in 0..100 {
            sim.step(false);
        }
        assert!(sim.run_until(300, |sim| sim.primary_of(G).is_some()), "seed {seed}: no primary");
        let primary = sim.primary_of(G).expect("a primary");
        let mut retried = None;
        for (writer, value) in [(100, 1), (101, 2), (102, 3)] {
            let write = sim.submit_to(writer, G, KvOp::Put { key: 0, value: VALUE_BASE + value }, primary);
            let answered = |sim: &Sim| write.is_some_and(|write| sim.history[write].returned_tick.is_some());
            // The registration goes first; the write follows once it is answered.
            for _ in 0..200 {
                if answered(&sim) {
                    break;
                }
                if writer == 100
                    && let Some(write) = write
                    && let Some(request) =
                        sim.outstanding_request(write).filter(|request| !is_registration(request.request))
                {
                    retried = Some((write, request));
                }
                sim.step(false);
            }
            assert!(answered(&sim), "seed {seed}: writer {writer} not answered");
        }
        let (write, request) = retried.expect("the first writer's write");
        assert!(request.request > RequestNumber(1), "seed {seed}: the first write follows the registration");
        let evicted = sim.client_id(write);
        sim.send_raw(write, sim.primary_of(G).unwrap_or(primary), request);
        for _ in 0..50 {
            sim.step(false);
        }
        assert!(sim.checkers.violations.is_empty(), "seed {seed}: {:#?}", sim.checkers.violations);
        // The register still holds the last writer's value.
        let read = sim.submit_to(103, G, KvOp::Get { key: 0 }, sim.primary_of(G).unwrap_or(primary));
        let read_answered = |sim: &Sim| read.is_some_and(|read| sim.history[read].returned_tick.is_some());
        assert!(sim.run_until(200, read_answered), "seed {seed}: the read not answered");
        let value = read.and_then(|read| sim.history[read].output);
        assert_eq!(value, Some(VALUE_BASE + 3), "seed {seed}: {evicted}'s first write was applied again");
    }
}

//! Who reads whom: the facts a [`Config`] implies (docs/contracts.md §2, §6, §7).
//!
//! P ranks are numbered as vLLM lays out its world, pipeline stage outermost:
//! `pp_rank * (pcp * tp) + pcp_rank * tp + tp_rank`
//! (vllm/distributed/parallel_state.py). The output rank, whose output carries the step's
//! result back, is the first rank of the last stage, `world_size - tp * pcp`
//! (vllm/v1/executor/multiproc_executor.py, `_get_output_rank`). A P rank is a
//! *transfer rank* when it serves reads: PCP rank 0 under the replicated layout, every
//! rank under the sharded one. Each D rank has one read handle per transfer rank in its
//! read plan, and may owe notify-only messages to covered ranks it does not read (MLA).

use crate::config::{
    Attention, Config, Connector, ExpectedCount, FailedStep, MlaNotify, NotifyId, PcpLayout,
    RecvingCombine, StageOutput, StoreLedger, Transfer,
};
use kvcc_aggregator::Rank;

/// One D read handle: D rank `decoder` reads a request's blocks from P rank `source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandlePlan {
    pub decoder: Rank,
    pub source: Rank,
}

/// Ranks that are interchangeable as a block: permuting whole groups (with their D ranks
/// and handles) maps behaviours to behaviours. Every group of a topology has one shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferGroup {
    pub prefill_ranks: Vec<Rank>,
    pub decode_ranks: Vec<Rank>,
    /// Indices into [`Topology::handles`].
    pub handles: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    pub prefill_world: Rank,
    pub decode_world: Rank,
    /// P's output rank; ranks from it on form the last pipeline stage. (D has no PP or
    /// PCP in the model: its output rank is 0.)
    pub prefill_output_rank: Rank,
    /// Do ranks of different pipeline stages behave differently (stages before the last
    /// return no output)? Replicas then span stages that are not interchangeable.
    pub stages_differ: bool,
    /// Per P rank: does it serve reads?
    pub transfer: Vec<bool>,
    /// Per P rank: notifications it waits for before reporting a send (the
    /// `request_id:expected_consumers` count D attaches); 0 for non-transfer ranks.
    pub expected_consumers: Vec<u8>,
    /// Read handles, ordered by D rank.
    pub handles: Vec<HandlePlan>,
    /// (D rank, P rank) notify-only messages owed after a successful read (MLA).
    pub notify_only: Vec<HandlePlan>,
    /// Do notify-only messages carry an id P does not recognise
    /// (`consumer.mla-notify-id = "local-request-id"`)? P then only logs them.
    pub notify_only_unrecognised: bool,
    /// Replicated PCP ranks > 0: each one interchangeable with every other.
    pub replicas: Vec<Rank>,
    /// Per P rank: for a replica, its PCP rank and the transfer rank (PCP rank 0, same TP
    /// and PP position) whose KV it holds a copy of; traces name a replica's synthetic
    /// report by them.
    pub replica_of: Vec<Option<(Rank, Rank)>>,
    pub groups: Vec<TransferGroup>,
    /// `E` of P's aggregator, and the count a P worker may announce later.
    pub prefill_expected: u32,
    pub prefill_announced: Option<u32>,
    /// `E` of D's aggregator.
    pub decode_expected: u32,
    /// Whether a transfer rank arms a lease when the send metadata arrives
    /// (`producer.lease`): traces say "lease armed" only then.
    pub leases: bool,
    /// Whether the order of P's `_reqs_to_send` matters: leases reaped head-only, and
    /// more than one request to order. Only then do states record it.
    pub ordered_leases: bool,
    /// What follows a worker's raising step (`scheduler.failed-step`): traces say whether
    /// its reports were dropped or kept.
    pub failed_step: FailedStep,
    /// How D's MultiConnector combines its children's reports (the trace tells it).
    pub recving_combine: RecvingCombine,
    /// P writes into D (`transfer = "push-writes"`): a handle is P's WRITE, and its
    /// notification goes to the D rank it wrote.
    pub push: bool,
    /// D loads synchronously (`consumer.load = "synchronous"`): traces say a request
    /// runs at admission and its load ends with the step, not with a report.
    pub sync_loads: bool,
    /// How the store connector counts store jobs (`producer.store-ledger`).
    pub store_ledger: StoreLedger,
    /// D's block pool (`decode.kv-blocks`): traces say a request queues for blocks, and
    /// how many are free.
    pub decode_blocks: Option<u8>,
    /// D's notifications travel as events of their own (`delivery.notification` late or
    /// duplicated): only then do states record those on their way.
    pub notifications_travel: bool,
    /// Both schedulers skip a completion for a request they have forgotten
    /// (`scheduler.unknown-completion = "drop"`): traces say so where it happens.
    pub drops_stale_completions: bool,
    /// D's heartbeats name D's own id, which P ignores (`consumer.heartbeat-id`): traces
    /// say why a lease ran out while D still held the request.
    pub heartbeats_unrecognised: bool,
    /// A P rank reports a request again when a notification for it arrives after its
    /// report (`producer.notification-after-report = "reported-again"`).
    pub reports_late_notifications: bool,
    /// A P rank reports a request at each D notification instead of counting its
    /// readers (`producer.notification-count = "each"`).
    pub reports_each_notification: bool,
}

impl Topology {
    /// Derives the topology of a validated config.
    pub fn new(config: &Config) -> Topology {
        let p = &config.prefill;
        let (tp, pp, pcp) = (p.tp, p.pp, p.pcp);
        let prefill_world = tp * pp * pcp;
        let decode_world = config.decode.tp;
        let rank = |t: Rank, s: Rank, c: Rank| s * (pcp * tp) + c * tp + t;
        let serving_pcp: Vec<Rank> = match p.layout {
            PcpLayout::Replicated => vec![0],
            PcpLayout::Sharded => (0..pcp).collect(),
        };
        let mut transfer = vec![false; usize::from(prefill_world)];
        for t in 0..tp {
            for s in 0..pp {
                for &c in &serving_pcp {
                    transfer[usize::from(rank(t, s, c))] = true;
                }
            }
        }
        // Every (tp, pp, serving pcp) rank of one P tp index.
        let column = |t: Rank| -> Vec<Rank> {
            let mut ranks = Vec::new();
            for &c in &serving_pcp {
                for s in 0..pp {
                    ranks.push(rank(t, s, c));
                }
            }
            ranks
        };

        let mut handles = Vec::new();
        let mut notify_only = Vec::new();
        let mut expected_consumers = vec![0u8; usize::from(prefill_world)];
        let mut groups = Vec::new();
        if decode_world >= tp {
            // Each P tp rank is read by `readers` D ranks; each D rank reads one column.
            let readers = decode_world / tp;
            for t in 0..tp {
                let mut group = TransferGroup {
                    prefill_ranks: column(t),
                    decode_ranks: Vec::new(),
                    handles: Vec::new(),
                };
                for source in column(t) {
                    expected_consumers[usize::from(source)] = readers as u8;
                }
                for decoder in t * readers..(t + 1) * readers {
                    group.decode_ranks.push(decoder);
                    for source in column(t) {
                        group.handles.push(handles.len());
                        handles.push(HandlePlan { decoder, source });
                    }
                }
                groups.push(group);
            }
        } else {
            // Each D rank covers `covered` P tp ranks: dense reads a head slice from each;
            // MLA (KV replicated across TP) reads one and owes the rest a notification.
            let covered = tp / decode_world;
            for decoder in 0..decode_world {
                let mut group = TransferGroup {
                    prefill_ranks: Vec::new(),
                    decode_ranks: vec![decoder],
                    handles: Vec::new(),
                };
                for (i, t) in (decoder * covered..(decoder + 1) * covered).enumerate() {
                    let read = p.attention == Attention::Dense || i == 0;
                    for source in column(t) {
                        group.prefill_ranks.push(source);
                        expected_consumers[usize::from(source)] = 1;
                        if read {
                            group.handles.push(handles.len());
                            handles.push(HandlePlan { decoder, source });
                        } else if config.producer.mla_notify == MlaNotify::EveryCoveredRank {
                            notify_only.push(HandlePlan { decoder, source });
                        }
                    }
                }
                groups.push(group);
            }
        }
        let replicas = (0..prefill_world)
            .filter(|&r| !transfer[usize::from(r)])
            .collect();
        let mut replica_of = vec![None; usize::from(prefill_world)];
        if p.layout == PcpLayout::Replicated {
            for t in 0..tp {
                for s in 0..pp {
                    for c in 1..pcp {
                        replica_of[usize::from(rank(t, s, c))] = Some((c, rank(t, s, 0)));
                    }
                }
            }
        }

        let count = |formula: ExpectedCount, world: Rank, pcp: Rank| -> u32 {
            match formula {
                ExpectedCount::WorldSize => u32::from(world),
                ExpectedCount::WorldSizeOverPcp => u32::from(world / pcp),
                ExpectedCount::Fixed(n) => u32::from(n),
            }
        };
        // MultiConnector: the offloading child's count is None, so the whole count is None
        // and the aggregator falls back to world_size (docs/contracts.md §8).
        let multi = config.connector == Connector::MultiOffload;
        let prefill_expected = if multi {
            u32::from(prefill_world)
        } else {
            count(config.expected_count, prefill_world, pcp)
        };
        let decode_expected = if multi {
            u32::from(decode_world)
        } else {
            count(config.expected_count, decode_world, 1)
        };
        let prefill_announced = config.announced_count.map(|f| count(f, prefill_world, pcp));
        Topology {
            prefill_world,
            decode_world,
            prefill_output_rank: prefill_world - tp * pcp,
            stages_differ: pp > 1 && p.pp_stage_output == StageOutput::None,
            transfer,
            expected_consumers,
            handles,
            notify_only,
            notify_only_unrecognised: config.consumer.mla_notify_id == NotifyId::LocalRequestId,
            replicas,
            replica_of,
            groups,
            prefill_expected,
            prefill_announced,
            leases: config.producer.lease,
            notifications_travel: config.notification_delivery(crate::message::Delivery::Late)
                || config.notification_delivery(crate::message::Delivery::Duplicated),
            reports_late_notifications: config.producer.notification_after_report
                == crate::config::NotificationAfterReport::ReportedAgain,
            reports_each_notification: config.producer.notification_count
                == crate::config::NotificationCount::Each,
            heartbeats_unrecognised: config.consumer.heartbeat_id == NotifyId::LocalRequestId,
            drops_stale_completions: config.scheduler.unknown_completion
                == crate::config::UnknownCompletion::Drop,
            ordered_leases: config.reaps_in_queue_order() && config.requests > 1,
            failed_step: config.scheduler.failed_step,
            recving_combine: config.consumer.recving_combine,
            push: config.transfer == Transfer::PushWrites,
            sync_loads: config.consumer.load == crate::config::LoadMode::Synchronous,
            store_ledger: config.producer.store_ledger,
            decode_blocks: config.decode.kv_blocks,
            decode_expected,
        }
    }

    /// Is this P rank in a pipeline stage before the last?
    pub fn before_last_stage(&self, rank: Rank) -> bool {
        rank < self.prefill_output_rank
    }

    pub fn is_transfer(&self, rank: Rank) -> bool {
        self.transfer[usize::from(rank)]
    }

    /// Handles of one D rank, as indices into [`Topology::handles`].
    pub fn handles_of(&self, decoder: Rank) -> impl Iterator<Item = usize> + '_ {
        self.handles
            .iter()
            .enumerate()
            .filter(move |(_, h)| h.decoder == decoder)
            .map(|(i, _)| i)
    }

    /// Handles reading from one P rank.
    pub fn handles_reading(&self, source: Rank) -> impl Iterator<Item = usize> + '_ {
        self.handles
            .iter()
            .enumerate()
            .filter(move |(_, h)| h.source == source)
            .map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::base;

    #[test]
    fn replicated_pcp_serves_from_pcp_rank_zero_only() {
        let mut c = base();
        c.prefill.tp = 2;
        c.prefill.pcp = 4;
        c.decode.tp = 2;
        let t = Topology::new(&c);
        assert_eq!(t.prefill_world, 8);
        assert_eq!(t.transfer.iter().filter(|&&x| x).count(), 2);
        assert_eq!(t.replicas, vec![2, 3, 4, 5, 6, 7]);
        // Rank 5 is PCP rank 2 at TP rank 1: a copy of P rank 1's KV.
        assert_eq!(t.replica_of[5], Some((2, 1)));
        assert_eq!(t.replica_of[1], None);
        assert_eq!(t.handles.len(), 2);
        assert_eq!(t.prefill_expected, 8);
        assert_eq!(t.groups.len(), 2);
    }

    #[test]
    fn ranks_are_laid_out_as_vllm_does_with_the_output_rank_in_the_last_stage() {
        let mut c = base();
        c.prefill.tp = 2;
        c.prefill.pp = 2;
        c.prefill.pcp = 2;
        c.decode.tp = 2;
        let t = Topology::new(&c);
        // Stage 0 holds ranks 0-3, stage 1 ranks 4-7; within a stage PCP rank 0's TP
        // ranks come first and serve reads.
        assert_eq!(t.prefill_output_rank, 4);
        assert_eq!(t.replicas, vec![2, 3, 6, 7]);
        assert_eq!(t.groups[0].prefill_ranks, vec![0, 4]);
        assert_eq!(t.groups[1].prefill_ranks, vec![1, 5]);
        assert!((0..4).all(|r| t.before_last_stage(r)));
        assert!((4..8).all(|r| !t.before_last_stage(r)));
    }

    #[test]
    fn heterogeneous_tp_read_plans() {
        let mut c = base();
        c.prefill.tp = 4;
        c.prefill.pcp = 1;
        c.decode.tp = 2;
        let dense = Topology::new(&c);
        assert_eq!(
            dense.handles.len(),
            4,
            "each D rank reads a head slice from 2 P ranks"
        );
        assert_eq!(dense.expected_consumers, vec![1, 1, 1, 1]);
        c.prefill.attention = Attention::Mla;
        let mla = Topology::new(&c);
        assert_eq!(mla.handles.len(), 2, "each D rank reads one P rank");
        assert_eq!(mla.notify_only.len(), 2, "and notifies the other");
        c.producer.mla_notify = MlaNotify::ReadRanksOnly;
        assert!(Topology::new(&c).notify_only.is_empty());
        c.prefill.tp = 1;
        c.decode.tp = 2;
        let fan_out = Topology::new(&c);
        assert_eq!(
            fan_out.expected_consumers,
            vec![2],
            "two D ranks read the one P rank"
        );
    }

    #[test]
    fn multi_connector_falls_back_to_world_size() {
        let mut c = base();
        c.expected_count = ExpectedCount::WorldSizeOverPcp;
        assert_eq!(Topology::new(&c).prefill_expected, 1);
        c.connector = Connector::MultiOffload;
        assert_eq!(Topology::new(&c).prefill_expected, 2);
    }
}

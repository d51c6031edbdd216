//! The core as a short byte string, for the model checker: every state it explores holds
//! two aggregators, packed once per transition and unpacked once per explored state.
//! Hand-written (LEB128 integers, one tag byte per entry) because a generic serde
//! encoding spent most of its time dispatching, and canonical: equal aggregators give
//! equal bytes, since maps are written in key order and rank sets are canonical.

use crate::core::{Aggregator, Entry, Policy};
use crate::entries::{OrderedEntryMap, RankSet};
use smallvec::SmallVec;
use std::collections::BTreeSet;

fn put(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads an integer `put` wrote; None on truncated or overlong input.
fn take(input: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = input.split_first()?;
        *input = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn take_u32(input: &mut &[u8]) -> Option<u32> {
    u32::try_from(take(input)?).ok()
}

const ANNOUNCED: u8 = 0;
const OPEN: u8 = 1;
const OPEN_ANNOUNCED: u8 = 2;
const EMITTED: u8 = 3;

fn put_ranks(out: &mut Vec<u8>, ranks: &RankSet) {
    put(out, ranks.words.len() as u64);
    for &word in &ranks.words {
        put(out, word);
    }
}

fn take_ranks(input: &mut &[u8]) -> Option<RankSet> {
    let len = take(input)?;
    let words = (0..len)
        .map(|_| take(input))
        .collect::<Option<SmallVec<_>>>()?;
    // Canonical sets never end in a zero word: refuse what pack cannot have written.
    (words.last() != Some(&0)).then_some(RankSet { words })
}

fn put_entry(out: &mut Vec<u8>, entry: &Entry) {
    match entry {
        Entry::Announced => out.push(ANNOUNCED),
        Entry::Open {
            remaining,
            reporters,
            announced,
        } => {
            out.push(if *announced { OPEN_ANNOUNCED } else { OPEN });
            put(out, u64::from(*remaining));
            put_ranks(out, reporters);
        }
        Entry::Emitted { quorum } => {
            out.push(EMITTED);
            put_ranks(out, quorum);
        }
    }
}

fn take_entry(input: &mut &[u8]) -> Option<Entry> {
    let (&tag, rest) = input.split_first()?;
    *input = rest;
    Some(match tag {
        ANNOUNCED => Entry::Announced,
        OPEN | OPEN_ANNOUNCED => Entry::Open {
            remaining: take_u32(input)?,
            reporters: take_ranks(input)?,
            announced: tag == OPEN_ANNOUNCED,
        },
        EMITTED => Entry::Emitted {
            quorum: take_ranks(input)?,
        },
        _ => return None,
    })
}

impl<Id, Map> Aggregator<Id, Map>
where
    Id: Ord + Copy + Into<u64> + TryFrom<u64>,
    Map: OrderedEntryMap<Id>,
{
    /// Appends this aggregator's canonical bytes to `out`.
    pub fn pack(&self, out: &mut Vec<u8>) {
        out.push(match self.policy {
            Policy::Countdown => 0,
            Policy::Strict => 1,
        });
        put(out, u64::from(self.expected));
        for entries in [&self.sending, &self.recving] {
            put(out, entries.len() as u64);
            for (&id, entry) in entries.iter() {
                put(out, id.into());
                put_entry(out, entry);
            }
        }
        put(out, self.pending_failed.len() as u64);
        for &id in &self.pending_failed {
            put(out, id.into());
        }
    }

    /// The aggregator `pack` wrote at the start of `input`, which is advanced past it.
    /// None when the bytes are not something `pack` writes.
    pub fn unpack(input: &mut &[u8]) -> Option<Self> {
        let (&policy, rest) = input.split_first()?;
        *input = rest;
        let policy = match policy {
            0 => Policy::Countdown,
            1 => Policy::Strict,
            _ => return None,
        };
        let expected = take_u32(input)?;
        let id = |input: &mut &[u8]| Id::try_from(take(input)?).ok();
        let mut entries = || -> Option<Map> {
            let len = take(input)?;
            // Written in key order, so collecting builds an ordered map in bulk.
            (0..len)
                .map(|_| Some((id(input)?, take_entry(input)?)))
                .collect()
        };
        let sending = entries()?;
        let recving = entries()?;
        let len = take(input)?;
        let pending_failed = (0..len)
            .map(|_| id(input))
            .collect::<Option<BTreeSet<Id>>>()?;
        (expected > 0).then_some(Aggregator {
            policy,
            expected,
            sending,
            recving,
            pending_failed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Direction, SortedAggregator, WorkerOutput};

    /// Unpacking what packing wrote gives the aggregator back, and the same contents in
    /// the short sorted vector pack to the same bytes.
    fn round_trip(aggregator: &Aggregator<u8>) {
        let mut bytes = Vec::new();
        aggregator.pack(&mut bytes);
        let mut input = &bytes[..];
        assert_eq!(Aggregator::unpack(&mut input).as_ref(), Some(aggregator));
        assert!(input.is_empty(), "unpack reads exactly what pack wrote");
        let mut input = &bytes[..];
        let sorted = SortedAggregator::<u8>::unpack(&mut input).expect("the same bytes");
        let mut sorted_bytes = Vec::new();
        sorted.pack(&mut sorted_bytes);
        assert_eq!(sorted_bytes, bytes);
    }

    #[test]
    fn every_kind_of_entry_survives_packing() {
        for policy in [Policy::Countdown, Policy::Strict] {
            let mut aggregator = Aggregator::<u8>::new(policy, 3);
            round_trip(&aggregator);
            aggregator.announce(Direction::Sending, 7);
            aggregator.announce(Direction::Recving, 200);
            let mut report = WorkerOutput::empty(70);
            report.finished_sending.insert(7);
            report.finished_recving.insert(200);
            report.failed_recving.insert(200);
            aggregator.aggregate(&[report], 0);
            round_trip(&aggregator);
            let reports: Vec<_> = (0..3)
                .map(|rank| {
                    let mut output = WorkerOutput::empty(rank);
                    output.finished_sending.insert(9);
                    output
                })
                .collect();
            aggregator.announce(Direction::Sending, 9);
            aggregator.aggregate(&reports, 0);
            aggregator.retire(Direction::Recving, &200);
            round_trip(&aggregator);
        }
    }

    #[test]
    fn integers_round_trip_at_their_edges() {
        for value in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut bytes = Vec::new();
            put(&mut bytes, value);
            let mut input = &bytes[..];
            assert_eq!(take(&mut input), Some(value));
            assert!(input.is_empty());
        }
        assert_eq!(take(&mut &[0x80u8][..]), None, "truncated");
        assert_eq!(take(&mut &[0xffu8; 11][..]), None, "overlong");
    }
}

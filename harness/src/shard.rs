//! Sharding: spreading one run's (spec, point) checks over N machines, the way past one
//! runner for a model checker in CI. Every shard plans the whole run, estimates what each
//! check costs, and assigns checks to shards by greedy longest-processing-time first: the
//! costliest check goes to the least-loaded shard, and so on. Estimates and ties are
//! deterministic, so `--shard 1/N` .. `N/N` on N machines run every check exactly once,
//! and `kvcc merge` puts their JSON lines back together.
//!
//! A check's cost is estimated by checking the same point with one request, which takes
//! milliseconds, and growing its unique-state count to the point's request count:
//! requests interleave almost independently (they share only the aggregators and the
//! engine steps), so each request's state is about one of the one-request states. Where
//! requests are interchangeable (request symmetry), a state is a multiset of them:
//! `C(s + n - 1, n)` of `s` states at `n` requests, within 1.4x of the #59325 fix's
//! counts where `s^n` was up to 8x over. Where P's lease queue orders them (a head-only
//! reaper) or symmetry is off (`--no-symmetry`, a strict aggregator, ...), the power
//! `s^n` (tests/e2e/shard.rs measures each). File
//! order would not do: one matrix holds checks from a few states to hundreds of
//! thousands.
//! Where one request stands for all (`kvcc_model::independence`) the probe is of that
//! model, and when it holds the check is that search: its count is the cost.
//!
//! A probe obeys the check's own limits (states, depth, time, memory): a run asked to
//! take two seconds a check must not spend a minute estimating first. A check is never
//! costlier than its state limit, so no estimate exceeds it. A probe cut by time or
//! memory counts as the costliest a probe can say; whether it is cut depends on the
//! machine only when one probe of at most 200,000 states takes about the whole time
//! limit, and then the shards of one run could split differently: `kvcc merge` refuses
//! such shards (a check missing or given twice), never merges them.

use crate::run::{self, Settings};
use crate::spec::{Case, Spec};
use kvcc_model::checker::{self, Cutoff, Limits, Options, Verdict};
use kvcc_model::{independence, ContractModel};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// `--shard I/N`: the I-th of N slices of a run (1-based, as CI matrices count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Shard, String> {
        let bad = || format!("`{text}` is not I/N with 1 <= I <= N (e.g. 2/3)");
        let (index, count) = text.split_once('/').ok_or_else(bad)?;
        let index: usize = index.trim().parse().map_err(|_| bad())?;
        let count: usize = count.trim().parse().map_err(|_| bad())?;
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The one-request probe may not run away on a huge spec: past this many states its
/// count is only a lower bound, which still ranks the check among the costliest.
const PROBE_STATES_MAX: u64 = 200_000;

/// Estimated cost of each case (see the module docs), in plan order, under the limits
/// `settings` and each spec set. Probes are shared between cases whose one-request
/// models and limits are equal (a `requests` matrix entry).
pub fn estimate(cases: &[(&Spec, &Case)], settings: &Settings) -> Vec<u64> {
    let mut probed: HashMap<(kvcc_model::Config, bool, Limits), Probe> = HashMap::new();
    let mut probe_of = |model: ContractModel, limits: &Limits| {
        *probed
            .entry((model.config.clone(), model.others_step, limits.clone()))
            .or_insert_with(|| probe(&model, limits, settings))
    };
    cases
        .iter()
        .map(|(spec, case)| {
            let limits = run::limits(spec, settings);
            let cap = |cost: u64| limits.max_states.map_or(cost, |max| cost.min(max));
            // Where one request stands for all, the probe is of that model (about as
            // large as one request alone): when it holds, the check is that search.
            let standing =
                independence::one_of_many(&case.config).filter(|_| !settings.no_independence);
            let stands = standing.is_some();
            let one = standing.unwrap_or_else(|| {
                let mut one = case.config.clone();
                one.requests = 1;
                ContractModel::new(one)
            });
            let Probe { states, held } = probe_of(one, &limits);
            if stands && held {
                return cap(states);
            }
            cap(grown(
                states,
                case.config.requests,
                interchangeable(&case.config, settings),
            ))
        })
        .collect()
}

/// Whether the search treats `config`'s requests as interchangeable, each state standing
/// for every renaming of them: not without symmetry (`--no-symmetry`, or where the model
/// turns it off, `State::symmetric`), nor where P's lease queue orders them.
fn interchangeable(config: &kvcc_model::Config, settings: &Settings) -> bool {
    !settings.no_symmetry
        && !config.reaps_in_queue_order()
        && ContractModel::new(config.clone())
            .initial_state()
            .symmetric()
}

/// About how many states `requests` requests have where one has `states`: the
/// multisets of `requests` of them where requests are `interchangeable`, else every
/// tuple (saturating).
fn grown(states: u64, requests: u8, interchangeable: bool) -> u64 {
    let (s, n) = (u128::from(states.max(1)), u128::from(requests.max(1)));
    let count = if interchangeable {
        // C(s + n - 1, n), one factor at a time: after the k-th division the count is
        // C(s + k - 1, k), so each division is exact.
        (1..=n).fold(1u128, |c, k| c.saturating_mul(s + k - 1) / k)
    } else {
        (0..n).fold(1u128, |c, _| c.saturating_mul(s))
    };
    u64::try_from(count).unwrap_or(u64::MAX)
}

/// What a probe found: unique states, and whether the model held.
#[derive(Clone, Copy)]
struct Probe {
    states: u64,
    held: bool,
}

/// `model`'s unique states under the check's `limits`, capped at [`PROBE_STATES_MAX`];
/// a probe cut by time or memory counts as the cap. A signal that stops the run stops
/// its probes too.
fn probe(model: &ContractModel, limits: &Limits, settings: &Settings) -> Probe {
    let options = Options {
        threads: 1,
        // As the check explores: a probe with symmetry under `--no-symmetry` would count
        // classes where the check counts states.
        symmetry: !settings.no_symmetry,
        limits: Limits {
            max_states: Some(
                limits
                    .max_states
                    .map_or(PROBE_STATES_MAX, |max| max.min(PROBE_STATES_MAX)),
            ),
            ..limits.clone()
        },
        interrupt: settings.interrupt.clone(),
        ..Options::default()
    };
    let report = checker::check(model, &options);
    let states = match report.cut() {
        Some(Cutoff::Time(_) | Cutoff::Memory(_) | Cutoff::Interrupted) => PROBE_STATES_MAX,
        _ => report.unique_states,
    };
    Probe {
        states,
        held: matches!(report.verdict, Verdict::Holds) && report.cut().is_none(),
    }
}

/// The shard (0-based) of every check: greedy longest-processing-time first. Checks go
/// in decreasing cost (ties: plan order) to the shard with the least cost so far (ties:
/// the lowest shard).
pub fn assign(costs: &[u64], count: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by(|&a, &b| costs[b].cmp(&costs[a]).then(a.cmp(&b)));
    let mut loads = vec![0u64; count.max(1)];
    let mut shard_of = vec![0; costs.len()];
    for check in order {
        let (lightest, _) = loads
            .iter()
            .enumerate()
            .min_by_key(|&(shard, load)| (*load, shard))
            .expect("at least one shard");
        loads[lightest] = loads[lightest].saturating_add(costs[check]);
        shard_of[check] = lightest;
    }
    shard_of
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_parses_i_of_n_and_refuses_the_rest() {
        assert_eq!("2/3".parse(), Ok(Shard { index: 2, count: 3 }));
        for bad in ["0/3", "4/3", "3", "a/b", "1/0", "/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn requests_grow_as_multisets_when_interchangeable_else_as_tuples() {
        use super::grown;
        assert_eq!(grown(191, 1, true), 191);
        assert_eq!(grown(191, 2, true), 191 * 192 / 2);
        assert_eq!(grown(191, 3, true), 191 * 192 * 193 / 6);
        assert_eq!(grown(191, 3, false), 191 * 191 * 191);
        assert_eq!(grown(0, 3, true), 1);
        assert_eq!(grown(u64::MAX, 3, false), u64::MAX);
        assert_eq!(grown(u64::MAX, 3, true), u64::MAX);
    }

    #[test]
    fn every_check_goes_to_exactly_one_shard_costliest_first() {
        let costs = [5, 100, 1, 60, 50, 7];
        let shards = assign(&costs, 3);
        assert_eq!(shards.len(), costs.len());
        // 100, 60 and 50 open the three shards; 7 and 5 join the lightest (50, then 57)
        // and 1 joins 60.
        assert_eq!(shards, vec![2, 0, 1, 1, 2, 2]);
        let loads: Vec<u64> = (0..3)
            .map(|s| {
                (0..costs.len())
                    .filter(|&c| shards[c] == s)
                    .map(|c| costs[c])
                    .sum()
            })
            .collect();
        assert_eq!(loads, vec![100, 61, 62]);
    }

    #[test]
    fn file_order_does_not_decide() {
        // The same costs in another order give the same loads.
        let a = assign(&[1, 2, 3, 100], 2);
        let b = assign(&[100, 3, 2, 1], 2);
        assert_eq!(a, vec![1, 1, 1, 0]);
        assert_eq!(b, vec![0, 1, 1, 1]);
    }
}

//! A recorded run of any size for the conform benchmarks (`tests/e2e/conform_throughput.rs`,
//! and `kvcc-bench --aggregator`'s conform setups): a prefill engine of 8 ranks under
//! vLLM's counting, where every step delay-frees a batch of requests with vLLM-shaped ids,
//! each rank reports each of them 1 to 4 steps later,
//! and the scheduler frees each one the step after its last report. The run conforms, so
//! conform does all of its work and finds nothing; memory must stay flat however long
//! it is.

use kvcc_aggregator::{Rank, WorkerOutput};
use kvcc_conform::format::{
    AbortedTransfers, Engine, EventKind, Header, PolicyName, RunWriter, FORMAT_VERSION,
};
use std::io;
use std::path::Path;

use crate::schedule::{LAG, REQUESTS_PER_STEP, WORLD_SIZE};

/// What was generated.
#[derive(Clone, Copy, Debug)]
pub struct Generated {
    pub bytes: u64,
    pub steps: u64,
    pub requests: u64,
}

/// A vLLM-like request id (`cmpl-<32 hex>-0`), unique per request.
fn name(request: u64) -> String {
    // SplitMix64's finaliser: a random-looking prefix, as vLLM's uuids are.
    let mut z = request.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    format!("cmpl-{:016x}{request:016x}-0", z ^ (z >> 31))
}

/// The step at which `rank` reports request `request`.
fn report_step(request: u64, rank: u64) -> u64 {
    request / REQUESTS_PER_STEP + 1 + (request + rank) % LAG
}

/// Writes a conforming run of at least `bytes_min` bytes into `dir`.
pub fn generate(dir: &Path, bytes_min: u64) -> io::Result<Generated> {
    let header = Header {
        format_version: FORMAT_VERSION,
        engine: Engine::Prefill,
        kv_role: Some("kv_producer".into()),
        kv_connector: "NixlConnector".into(),
        world_size: WORLD_SIZE,
        output_rank: 0,
        finished_count: None,
        aggregator_policy: PolicyName::Countdown,
        transfer_ranks: None,
        tp_size: Some(WORLD_SIZE),
        pp_size: Some(1),
        pcp_size: Some(1),
        aborted_transfers: AbortedTransfers::FreeAtFirst,
    };
    let mut writer = RunWriter::create(dir, &header)?;
    // An estimate, to know when to stop; the files' sizes are returned.
    let mut bytes = 0u64;
    let mut step = 0u64;
    let mut requests = 0u64;
    loop {
        // Requests delay-freed before this step are reported from the next one on.
        let adding = bytes < bytes_min;
        if adding {
            for request in requests..requests + REQUESTS_PER_STEP {
                let id = name(request);
                writer.event(step, EventKind::DelayFreed, &id)?;
                bytes += 60 + id.len() as u64;
            }
            requests += REQUESTS_PER_STEP;
        }
        // Freed the step after the last rank reported it.
        let first = (step.saturating_sub(LAG + 1)) * REQUESTS_PER_STEP;
        for request in first..requests.min(step * REQUESTS_PER_STEP) {
            let last = (0..u64::from(WORLD_SIZE))
                .map(|r| report_step(request, r))
                .max()
                .unwrap_or(0);
            if last + 1 == step {
                let id = name(request);
                writer.event(step, EventKind::Freed, &id)?;
                bytes += 55 + id.len() as u64;
            }
        }
        if !adding && first >= requests {
            break;
        }
        for rank in 0..WORLD_SIZE {
            let mut output: WorkerOutput<u64> = WorkerOutput::empty(rank as Rank);
            let from = step.saturating_sub(LAG) * REQUESTS_PER_STEP;
            for request in from..requests.min(step * REQUESTS_PER_STEP) {
                if report_step(request, u64::from(rank)) == step {
                    output.finished_sending.insert(request);
                }
            }
            bytes += 120 + output.finished_sending.len() as u64 * 41;
            writer.rank_step(rank as Rank, step, Some(&output), |&r| name(r))?;
        }
        step += 1;
    }
    writer.finish()?;
    let mut written = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() != "header.json" {
            written += entry.metadata()?.len();
        }
    }
    Ok(Generated {
        bytes: written,
        steps: step,
        requests,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_run_conforms() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let generated = generate(&run, 50_000).unwrap();
        assert!(generated.requests > 0);
        let report =
            kvcc_conform::check_run(&run.display().to_string(), &Default::default()).unwrap();
        assert!(report.conforms(), "{:#?}", report.findings);
        assert_eq!(report.steps, generated.steps);
        assert_eq!(report.requests_seen, generated.requests);
        assert_eq!(report.bytes, generated.bytes);
        assert!(report.bytes >= 50_000, "{}", report.bytes);
    }
}

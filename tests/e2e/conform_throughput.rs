//! The conform memory benchmark (not a timed test: `#[ignore]`, run on demand):
//!
//! ```sh
//! cargo test --release -p kvcc-e2e -- --ignored conform_throughput --nocapture
//! KVCC_BENCH_BYTES=268435456 cargo test --release ...   # a smaller run
//! KVCC_BENCH_DIR=/tmp/bench cargo test --release ...    # keep the run, for profiling
//! ```
//!
//! Generates a conforming recorded run of KVCC_BENCH_BYTES (default 1 GiB) in a temp
//! dir, runs `kvcc conform --stats` on it three times as a child process, and reports
//! the median throughput and peak RSS (VmHWM) — which must stay under 200 MiB however
//! long the run: conform streams, it never loads a run whole.

use std::process::Command;

const PEAK_RSS_MAX_MIB: f64 = 200.0;

/// (MiB/s, peak RSS MiB) from a `stats:` line.
fn parse_stats(stderr: &str) -> (f64, f64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("stats: "))
        .unwrap_or_else(|| panic!("no stats line: {stderr}"));
    let number_before = |suffix: &str| -> f64 {
        let end = line
            .find(suffix)
            .unwrap_or_else(|| panic!("{suffix}: {line}"));
        let start = line[..end].rfind([' ', '(']).map_or(0, |i| i + 1);
        line[start..end]
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{line}"))
    };
    let peak = line
        .split("peak RSS ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    (number_before(" MiB/s"), peak)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[test]
#[ignore = "benchmark: generates a 1 GiB run; run with --ignored --nocapture"]
fn conform_streams_a_1_gib_run_under_200_mib() {
    let bytes: u64 = std::env::var("KVCC_BENCH_BYTES")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(1 << 30);
    // KVCC_BENCH_DIR keeps the run (for profiling), reusing it when it is already there.
    let tmp = tempfile::tempdir().expect("temp dir");
    let run = match std::env::var_os("KVCC_BENCH_DIR") {
        Some(dir) => std::path::PathBuf::from(dir).join("prefill"),
        None => tmp.path().join("prefill"),
    };
    let started = std::time::Instant::now();
    if run.join("header.json").exists() {
        std::fs::remove_dir_all(&run).expect("old run removed");
    }
    let generated = kvcc_bench::recorded_run::generate(&run, bytes).expect("run generated");
    println!(
        "generated {} bytes ({} steps, {} requests, 8 ranks) in {:.1} s",
        generated.bytes,
        generated.steps,
        generated.requests,
        started.elapsed().as_secs_f64()
    );
    let mut rates = Vec::new();
    let mut peaks = Vec::new();
    for attempt in 1..=3 {
        let output = Command::new(crate::common::KVCC)
            .args(["conform", &run.display().to_string(), "--stats"])
            .output()
            .expect("kvcc runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{}{stderr}",
            String::from_utf8_lossy(&output.stdout)
        );
        let (rate, peak) = parse_stats(&stderr);
        println!("run {attempt}: {rate:.1} MiB/s, peak RSS {peak:.1} MiB");
        rates.push(rate);
        peaks.push(peak);
    }
    let (rate, peak) = (median(rates), median(peaks));
    println!(
        "conform, median of 3: {rate:.1} MiB/s, peak RSS {peak:.1} MiB over {:.0} MiB",
        generated.bytes as f64 / f64::from(1u32 << 20)
    );
    assert!(
        peak < PEAK_RSS_MAX_MIB,
        "peak RSS {peak:.1} MiB >= {PEAK_RSS_MAX_MIB} MiB"
    );
}

#[test]
fn stats_lines_parse() {
    let line = "stats: d: 100 bytes in 0.5 s (12.5 MiB/s), 3 steps, 2 requests (at most 2 tracked at once), peak RSS 7.5 MiB";
    assert_eq!(parse_stats(line), (12.5, 7.5));
}

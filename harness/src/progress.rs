//! Progress of a `kvcc check` run on stderr: on a terminal, an indicatif bar over the
//! whole matrix (states, states/s, depth and memory of the running check, and the
//! matrix's ETA from the shard cost estimates); elsewhere (a CI log), one plain line
//! every few seconds while a check runs, so a long check is never silent. Quiet runs
//! show neither.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvcc_model::checker::Progress as Counters;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Seconds between two plain progress lines when stderr is not a terminal; the
/// environment variable `KVCC_PROGRESS_INTERVAL` overrides it (tests use a short one).
const LINE_INTERVAL_SECONDS: f64 = 5.0;

/// What is being checked, shared with the thread that draws.
struct Current {
    /// 1-based position of the check in this run.
    number: usize,
    title: String,
    started: Instant,
    /// Estimated cost of the check, and of the checks done before it.
    cost: u64,
    done_cost: u64,
}

pub struct Progress {
    counters: Arc<Counters>,
    current: Arc<Mutex<Option<Current>>>,
    /// Estimated cost of each check of the run, in run order (all 1 without estimates).
    costs: Vec<u64>,
    done_cost: u64,
    bar: Option<ProgressBar>,
    stop: Arc<AtomicBool>,
    drawer: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// A display for `checks` checks, with their estimated costs where the run has
    /// them: a bar when stderr is a terminal, plain lines when not, nothing when `quiet`.
    /// Without estimates a plain line says which check runs, not how much of the run is
    /// done: a check's share of the run is unknown.
    pub fn new(checks: usize, estimates: Option<Vec<u64>>, quiet: bool) -> Progress {
        let estimated = estimates.is_some();
        let costs = estimates.unwrap_or_else(|| vec![1; checks]);
        let counters = Arc::new(Counters::default());
        let current: Arc<Mutex<Option<Current>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let total = costs.iter().sum::<u64>().max(1);
        let (bar, drawer) = if quiet {
            (None, None)
        } else if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{prefix} [{bar:20}] ETA {eta} {wide_msg}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            let drawer = spawn_bar(&bar, &counters, &current, &stop);
            (Some(bar), Some(drawer))
        } else {
            let interval = std::env::var("KVCC_PROGRESS_INTERVAL")
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|s| *s > 0.0)
                .unwrap_or(LINE_INTERVAL_SECONDS);
            let drawer = spawn_lines(
                Duration::from_secs_f64(interval),
                costs.len(),
                estimated.then_some(total),
                &counters,
                &current,
                &stop,
            );
            (None, Some(drawer))
        };
        Progress {
            counters,
            current,
            costs,
            done_cost: 0,
            bar,
            stop,
            drawer,
        }
    }

    /// The counters the checker publishes into.
    pub fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    /// A check begins: `index` is its position in this run (0-based).
    pub fn start(&mut self, index: usize, title: &str) {
        self.counters.reset();
        let cost = self.costs.get(index).copied().unwrap_or(1);
        if let Some(bar) = &self.bar {
            bar.set_prefix(format!("{}/{}", index + 1, self.costs.len()));
            bar.set_position(self.done_cost);
        }
        *lock(&self.current) = Some(Current {
            number: index + 1,
            title: title.to_string(),
            started: Instant::now(),
            cost,
            done_cost: self.done_cost,
        });
    }

    /// Runs `f` (which prints to stdout) with the bar out of the way.
    pub fn suspend(&self, f: impl FnOnce()) {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// The check begun last is done.
    pub fn finish(&mut self) {
        if let Some(current) = lock(&self.current).take() {
            self.done_cost += current.cost;
        }
        if let Some(bar) = &self.bar {
            bar.set_position(self.done_cost);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(drawer) = self.drawer.take() {
            let _ = drawer.join();
        }
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// `12,345 states (6,789/s), depth 7, 120 MiB`.
fn stats(counters: &Counters, current: &Current) -> String {
    let explored = counters.explored.load(Ordering::Relaxed);
    let depth = counters.depth.load(Ordering::Relaxed);
    let rate = explored as f64 / current.started.elapsed().as_secs_f64().max(1e-3);
    let memory = resident_mib().map_or(String::new(), |m| format!(", {m} MiB"));
    format!(
        "{} states ({}/s), depth {depth}{memory}",
        thousands(explored),
        thousands(rate as u64)
    )
}

/// Where the run is in estimated cost, counting the running check as far as its states
/// are of its estimate.
fn position(counters: &Counters, current: &Current) -> u64 {
    let explored = counters.explored.load(Ordering::Relaxed);
    current.done_cost + explored.min(current.cost.saturating_sub(1))
}

fn spawn_bar(
    bar: &ProgressBar,
    counters: &Arc<Counters>,
    current: &Arc<Mutex<Option<Current>>>,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let (bar, counters, current, stop) = (
        bar.clone(),
        Arc::clone(counters),
        Arc::clone(current),
        Arc::clone(stop),
    );
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if let Some(current) = lock(&current).as_ref() {
                bar.set_position(position(&counters, current));
                // The numbers first: a narrow terminal cuts the message's end, the title.
                bar.set_message(format!("{} {}", stats(&counters, current), current.title));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

fn spawn_lines(
    interval: Duration,
    checks: usize,
    total_cost: Option<u64>,
    counters: &Arc<Counters>,
    current: &Arc<Mutex<Option<Current>>>,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let (counters, current, stop) = (Arc::clone(counters), Arc::clone(current), Arc::clone(stop));
    std::thread::spawn(move || {
        let mut last = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20).min(interval));
            if last.elapsed() < interval {
                continue;
            }
            last = Instant::now();
            if let Some(current) = lock(&current).as_ref() {
                let done = total_cost.map_or(String::new(), |total| {
                    format!(
                        "; run ~{}% done",
                        100 * position(&counters, current) / total
                    )
                });
                eprintln!(
                    "kvcc: check {}/{checks} {}: {}{done}",
                    current.number,
                    current.title,
                    stats(&counters, current)
                );
            }
        }
    })
}

/// The process's resident memory, from the kernel.
fn resident_mib() -> Option<u64> {
    let statm = procfs::process::Process::myself().ok()?.statm().ok()?;
    Some((statm.resident * procfs::page_size()) >> 20)
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_groups_digits() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1_234_567), "1,234,567");
    }
}

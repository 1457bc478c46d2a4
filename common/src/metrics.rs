//! Prometheus counters and gauges without a registry crate: each metric is
//! a static with its name and help text, rendered in the text format by
//! `/metrics`. Names start with `gpuledger_`; no per-job or per-tenant
//! labels (cardinality stays fixed).

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// A monotonically increasing count.
#[derive(Debug)]
pub struct Counter {
    name: &'static str,
    help: &'static str,
    value: AtomicU64,
}

impl Counter {
    /// A counter starting at zero.
    pub const fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            value: AtomicU64::new(0),
        }
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// The current count.
    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug)]
pub struct Gauge {
    name: &'static str,
    help: &'static str,
    value: AtomicI64,
}

impl Gauge {
    /// A gauge starting at zero.
    pub const fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            value: AtomicI64::new(0),
        }
    }

    /// Sets the value.
    pub fn set(&self, v: i64) {
        self.value.store(v, Ordering::Relaxed);
    }
}

/// A distribution of durations: counts per upper bound (`le`, seconds),
/// their sum and count, as Prometheus histograms are exposed.
#[derive(Debug)]
pub struct Histogram {
    name: &'static str,
    help: &'static str,
    /// Upper bounds in microseconds, ascending; `+Inf` is implied.
    bounds_micros: &'static [u64],
    /// One count per bound, then the `+Inf` count (not cumulative).
    counts: [AtomicU64; 16],
    sum_micros: AtomicU64,
}

impl Histogram {
    /// A histogram over `bounds_micros` (at most 15 bounds, ascending).
    pub const fn new(
        name: &'static str,
        help: &'static str,
        bounds_micros: &'static [u64],
    ) -> Self {
        assert!(bounds_micros.len() < 16, "at most 15 bucket bounds");
        Self {
            name,
            help,
            bounds_micros,
            counts: [const { AtomicU64::new(0) }; 16],
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Records one duration.
    pub fn observe(&self, took: std::time::Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = self
            .bounds_micros
            .iter()
            .position(|&b| micros <= b)
            .unwrap_or(self.bounds_micros.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// The text exposition: cumulative `_bucket{le=…}`, `_sum`, `_count`.
    pub fn render(&self) -> String {
        let name = self.name;
        let mut out = format!("# HELP {name} {}\n# TYPE {name} histogram\n", self.help);
        let mut cumulative = 0;
        for (i, bound) in self.bounds_micros.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let le = *bound as f64 / 1e6;
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        cumulative += self.counts[self.bounds_micros.len()].load(Ordering::Relaxed);
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
        out
    }
}

/// A counter with labels: one value per combination of label values.
#[derive(Debug)]
pub struct CounterFamily {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    values: std::sync::Mutex<std::collections::BTreeMap<Vec<String>, u64>>,
}

impl CounterFamily {
    /// A family named `name` with these label names.
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            help,
            labels,
            values: std::sync::Mutex::new(std::collections::BTreeMap::new()),
        }
    }

    /// Adds one to the counter of these label values (in `labels` order).
    pub fn inc(&self, values: &[&str]) {
        if let Ok(mut map) = self.values.lock() {
            let key = values.iter().map(|v| (*v).to_owned()).collect();
            *map.entry(key).or_default() += 1;
        }
    }

    /// The value of these label values.
    pub fn get(&self, values: &[&str]) -> u64 {
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        self.values
            .lock()
            .map(|map| map.get(&key).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Its text exposition.
    pub fn render(&self) -> String {
        let (name, help) = (self.name, self.help);
        let mut out = format!("# HELP {name} {help}\n# TYPE {name} counter\n");
        let Ok(map) = self.values.lock() else {
            return out;
        };
        for (values, n) in map.iter() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .zip(values)
                .map(|(label, value)| format!("{label}=\"{}\"", escape(value)))
                .collect();
            let _ = writeln!(out, "{name}{{{}}} {n}", labels.join(","));
        }
        out
    }
}

/// A label value as the text exposition writes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A metric to render.
#[derive(Debug, Clone, Copy)]
pub enum Metric {
    Counter(&'static Counter),
    Gauge(&'static Gauge),
}

/// The Prometheus text exposition of `metrics`.
pub fn render(metrics: &[Metric]) -> String {
    let mut out = String::new();
    for metric in metrics {
        let (name, help, kind, value) = match metric {
            Metric::Counter(c) => (c.name, c.help, "counter", c.get() as i64),
            Metric::Gauge(g) => (g.name, g.help, "gauge", g.value.load(Ordering::Relaxed)),
        };
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    out
}

/// One labelled family in the text exposition: `name{label="v"} value`
/// per entry (`kind` is `counter` or `gauge`).
pub fn render_family(
    name: &str,
    help: &str,
    kind: &str,
    label: &str,
    values: &[(String, i64)],
) -> String {
    let mut out = format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
    for (value_of_label, value) in values {
        let escaped = escape(value_of_label);
        let _ = writeln!(out, "{name}{{{label}=\"{escaped}\"}} {value}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    static EVENTS: Counter = Counter::new("gpuledger_test_events_total", "Events seen.");
    static LAG: Gauge = Gauge::new("gpuledger_test_lag", "Records behind.");

    static ALERTS: CounterFamily = CounterFamily::new(
        "gpuledger_test_alerts_total",
        "Alerts.",
        &["tenant", "threshold"],
    );

    static TOOK: Histogram = Histogram::new(
        "gpuledger_test_seconds",
        "Time taken.",
        &[1_000, 10_000, 100_000],
    );

    #[test]
    fn a_histogram_counts_cumulatively_per_bound() {
        TOOK.observe(std::time::Duration::from_micros(500));
        TOOK.observe(std::time::Duration::from_millis(5));
        TOOK.observe(std::time::Duration::from_millis(7));
        TOOK.observe(std::time::Duration::from_secs(2));
        assert_eq!(
            TOOK.render(),
            "# HELP gpuledger_test_seconds Time taken.\n# TYPE gpuledger_test_seconds histogram\n\
             gpuledger_test_seconds_bucket{le=\"0.001\"} 1\n\
             gpuledger_test_seconds_bucket{le=\"0.01\"} 3\n\
             gpuledger_test_seconds_bucket{le=\"0.1\"} 3\n\
             gpuledger_test_seconds_bucket{le=\"+Inf\"} 4\n\
             gpuledger_test_seconds_sum 2.0125\ngpuledger_test_seconds_count 4\n"
        );
    }

    #[test]
    fn a_counter_family_counts_each_label_combination() {
        ALERTS.inc(&["team-a", "80"]);
        ALERTS.inc(&["team-a", "80"]);
        ALERTS.inc(&["te\"am", "100"]);
        assert_eq!(ALERTS.get(&["team-a", "80"]), 2);
        assert_eq!(ALERTS.get(&["team-b", "80"]), 0);
        assert_eq!(
            ALERTS.render(),
            "# HELP gpuledger_test_alerts_total Alerts.\n# TYPE gpuledger_test_alerts_total counter\n\
             gpuledger_test_alerts_total{tenant=\"te\\\"am\",threshold=\"100\"} 1\n\
             gpuledger_test_alerts_total{tenant=\"team-a\",threshold=\"80\"} 2\n"
        );
    }

    #[test]
    fn renders_a_labelled_family() {
        let text = render_family(
            "gpuledger_test_errors_total",
            "Errors.",
            "counter",
            "call",
            &[("memory_info".into(), 2), ("a\"b".into(), 1)],
        );
        assert_eq!(
            text,
            "# HELP gpuledger_test_errors_total Errors.\n# TYPE gpuledger_test_errors_total counter\n\
             gpuledger_test_errors_total{call=\"memory_info\"} 2\n\
             gpuledger_test_errors_total{call=\"a\\\"b\"} 1\n"
        );
    }

    #[test]
    fn renders_the_text_format() {
        EVENTS.add(3);
        LAG.set(-2);
        let text = render(&[Metric::Counter(&EVENTS), Metric::Gauge(&LAG)]);
        assert_eq!(
            text,
            "# HELP gpuledger_test_events_total Events seen.\n# TYPE gpuledger_test_events_total counter\ngpuledger_test_events_total 3\n\
             # HELP gpuledger_test_lag Records behind.\n# TYPE gpuledger_test_lag gauge\ngpuledger_test_lag -2\n"
        );
    }
}

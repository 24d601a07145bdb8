//! The metrics a test binary recorded, through the global debugging
//! recorder (install it once per binary: [`recorder`]).

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// This binary's debugging recorder, installed on first use.
pub fn recorder() -> &'static Snapshotter {
    static SNAP: std::sync::OnceLock<Snapshotter> = std::sync::OnceLock::new();
    SNAP.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        snapshotter
    })
}

/// One recorded metric: its name, its labels and its value.
#[derive(Debug)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: DebugValue,
}

/// The metrics labelled `dependency = name` (one snapshot: reading one
/// resets the recorder's counters).
pub fn of_dependency(name: &str) -> Vec<Sample> {
    recorder()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(ck, _, _, value)| Sample {
            name: ck.key().name().to_owned(),
            labels: ck
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect(),
            value,
        })
        .filter(|s| s.labels.iter().any(|(k, v)| k == "dependency" && v == name))
        .collect()
}

/// The value of the metric `name` whose labels include every one of
/// `labels`.
pub fn value<'a>(m: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
    m.iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .map(|s| &s.value)
}

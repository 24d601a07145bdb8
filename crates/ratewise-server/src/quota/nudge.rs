//! The streams of this instance, reachable from one another: when a data
//! plane subscribes to a bucket whose quota others hold, their streams are
//! nudged to re-divide it at once and push the new parts, instead of at
//! their next report (Envoy reports every 5 s).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;

/// A request to a stream to re-divide the lease `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Nudge {
    /// The lease (the bucket's quota key).
    pub(crate) key: String,
    /// The stream that asked.
    pub(crate) from: u64,
    /// Whether to nudge `from` back once this stream's part fell (so the
    /// asker takes up what was freed); a nudge back is never answered.
    pub(crate) answer: bool,
}

/// The live streams of this instance, by number.
#[derive(Clone, Default)]
pub(crate) struct Nudges {
    streams: Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Nudge>>>>,
}

impl Nudges {
    /// Registers stream `number`; its nudges arrive on the receiver.
    pub(crate) fn register(&self, number: u64) -> mpsc::UnboundedReceiver<Nudge> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().insert(number, tx);
        rx
    }

    /// Forgets stream `number` (it closed).
    pub(crate) fn unregister(&self, number: u64) {
        self.lock().remove(&number);
    }

    /// Nudges every stream but `from` about `key`, asking for an answer.
    pub(crate) fn others(&self, from: u64, key: &str) {
        for (&n, tx) in self.lock().iter() {
            if n != from {
                // A stream that closed meanwhile has nothing to re-divide.
                let _ = tx.send(Nudge {
                    key: key.to_owned(),
                    from,
                    answer: true,
                });
            }
        }
    }

    /// Nudges stream `to` back about `key` (no answer wanted).
    pub(crate) fn back(&self, to: u64, from: u64, key: &str) {
        if let Some(tx) = self.lock().get(&to) {
            let _ = tx.send(Nudge {
                key: key.to_owned(),
                from,
                answer: false,
            });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, mpsc::UnboundedSender<Nudge>>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_are_asked_and_the_asker_is_answered_once() {
        let n = Nudges::default();
        let (mut a, mut b, mut c) = (n.register(1), n.register(2), n.register(3));
        n.others(2, "k");
        assert_eq!(
            a.try_recv().ok(),
            Some(Nudge {
                key: "k".into(),
                from: 2,
                answer: true
            })
        );
        assert!(c.try_recv().is_ok_and(|x| x.answer));
        assert!(
            b.try_recv().is_err(),
            "the asker is not nudged by its own ask"
        );
        n.back(2, 1, "k");
        assert!(b.try_recv().is_ok_and(|x| !x.answer && x.from == 1));
        n.unregister(3);
        n.others(1, "k");
        assert!(c.try_recv().is_err());
    }
}

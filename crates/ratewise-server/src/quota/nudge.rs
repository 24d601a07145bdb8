//! The quota streams, reachable from one another: when a data plane
//! subscribes to a bucket whose quota others hold, their streams are nudged
//! to re-divide it at once and push the new parts, instead of at their next
//! report (Envoy reports every 5 s). Streams of this instance are reached
//! directly; with a single Redis, those of the other instances through a
//! Redis channel ([`Nudges::relay_through`]). A lost nudge costs only time:
//! the holder gives back at its next report, as without nudges.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;

/// The Redis channel the instances whose keys start with `prefix` nudge
/// one another on.
pub(crate) fn channel(prefix: &str) -> String {
    format!("{prefix}rlqs:nudge")
}

/// Where a nudge came from: a stream of this instance or of another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    Here(u64),
    There { instance: Arc<str>, stream: u64 },
}

/// A request to a stream to re-divide the lease `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Nudge {
    /// The lease (the bucket's quota key).
    pub(crate) key: String,
    /// The stream that asked.
    pub(crate) from: Origin,
    /// Whether to nudge `from` back once this stream's part fell (so the
    /// asker takes up what was freed); a nudge back is never answered.
    pub(crate) answer: bool,
}

/// How nudges reach the other instances.
#[derive(Clone)]
struct Relay {
    conn: ratewise_redis::Connection,
    deadline: Duration,
    channel: Arc<str>,
}

/// The live streams of this instance, by number, and the way to the others.
#[derive(Clone)]
pub(crate) struct Nudges {
    instance: Arc<str>,
    streams: Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Nudge>>>>,
    relay: Option<Relay>,
}

impl Nudges {
    /// The streams of `instance`, reached only within it.
    pub(crate) fn local(instance: Arc<str>) -> Self {
        Nudges {
            instance,
            streams: Arc::default(),
            relay: None,
        }
    }

    /// The same, also publishing to the other instances on their
    /// [`channel`] (each publish waits at most `deadline`).
    pub(crate) fn relay_through(
        self,
        conn: ratewise_redis::Connection,
        deadline: Duration,
        prefix: &str,
    ) -> Self {
        Nudges {
            relay: Some(Relay {
                conn,
                deadline,
                channel: channel(prefix).into(),
            }),
            ..self
        }
    }

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

    /// Nudges every stream but `from` about `key`, asking for an answer:
    /// this instance's directly, the others' through the relay.
    pub(crate) fn others(&self, from: u64, key: &str) {
        self.local_others(&Origin::Here(from), key);
        self.publish(format!("ask\t{}\t{from}\t{key}", self.instance));
    }

    fn local_others(&self, from: &Origin, key: &str) {
        for (&n, tx) in self.lock().iter() {
            if *from != Origin::Here(n) {
                // A stream that closed meanwhile has nothing to re-divide.
                let _ = tx.send(Nudge {
                    key: key.to_owned(),
                    from: from.clone(),
                    answer: true,
                });
            }
        }
    }

    /// Nudges the asker `to` back about `key` (no answer wanted).
    pub(crate) fn back(&self, to: &Origin, key: &str) {
        match to {
            Origin::Here(n) => self.local_back(*n, key),
            Origin::There { instance, stream } => {
                self.publish(format!("back\t{instance}\t{stream}\t{key}"));
            }
        }
    }

    fn local_back(&self, to: u64, key: &str) {
        if let Some(tx) = self.lock().get(&to) {
            let _ = tx.send(Nudge {
                key: key.to_owned(),
                // Never read: a nudge back is not answered.
                from: Origin::Here(to),
                answer: false,
            });
        }
    }

    /// Handles one message of the [`channel`]: an ask from another instance
    /// nudges this one's streams; a nudge back to one of this instance's
    /// streams reaches it. Anything else (this instance's own asks, garbage)
    /// is ignored.
    pub(crate) fn deliver(&self, message: &str) {
        let mut parts = message.splitn(4, '\t');
        let (Some(kind), Some(instance), Some(stream), Some(key)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        let Ok(stream) = stream.parse::<u64>() else {
            return;
        };
        match kind {
            "ask" if instance != &*self.instance => {
                let from = Origin::There {
                    instance: instance.into(),
                    stream,
                };
                self.local_others(&from, key);
            }
            "back" if instance == &*self.instance => self.local_back(stream, key),
            _ => {}
        }
    }

    fn publish(&self, message: String) {
        let Some(relay) = self.relay.clone() else {
            return;
        };
        tokio::spawn(async move {
            let mut conn = relay.conn;
            let mut cmd = redis::cmd("PUBLISH");
            cmd.arg(&*relay.channel).arg(message);
            let publish = cmd.query_async::<()>(&mut conn);
            match tokio::time::timeout(relay.deadline, publish).await {
                Ok(Ok(())) => {}
                // The holders give back at their next report instead.
                _ => metrics::counter!("ratewise_server_quota_nudges_lost_total").increment(1),
            }
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, mpsc::UnboundedSender<Nudge>>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Subscribes to `channel` on the Redis `client` connects to and hands every message
/// to `nudges`, resubscribing after a lost connection (every second until
/// Redis answers). Returns once the first attempt is over (subscribed or
/// refused) or after `ready_within`, so a service started after it hears the
/// others' asks whenever Redis is there.
pub(crate) async fn listen(
    client: redis::Client,
    nudges: Nudges,
    channel: String,
    ready_within: Duration,
) {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        loop {
            let subscribed = subscribe(&client, &channel).await;
            // Subscribed, or Redis refused: either way starting need not
            // wait longer (a refused Redis is retried below).
            if let Some(tx) = ready.take() {
                let _ = tx.send(());
            }
            if let Ok(mut pubsub) = subscribed {
                use tonic::codegen::tokio_stream::StreamExt;
                let mut messages = pubsub.on_message();
                while let Some(msg) = messages.next().await {
                    if let Ok(text) = msg.get_payload::<String>() {
                        nudges.deliver(&text);
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let _ = tokio::time::timeout(ready_within, ready_rx).await;
}

async fn subscribe(
    client: &redis::Client,
    channel: &str,
) -> redis::RedisResult<redis::aio::PubSub> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    Ok(pubsub)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_are_asked_and_the_asker_is_answered_once() {
        let n = Nudges::local("here".into());
        let (mut a, mut b, mut c) = (n.register(1), n.register(2), n.register(3));
        n.others(2, "k");
        assert_eq!(
            a.try_recv().ok(),
            Some(Nudge {
                key: "k".into(),
                from: Origin::Here(2),
                answer: true
            })
        );
        assert!(c.try_recv().is_ok_and(|x| x.answer));
        assert!(
            b.try_recv().is_err(),
            "the asker is not nudged by its own ask"
        );
        n.back(&Origin::Here(2), "k");
        assert!(b.try_recv().is_ok_and(|x| !x.answer));
        n.unregister(3);
        n.others(1, "k");
        assert!(c.try_recv().is_err());
    }

    #[test]
    fn messages_from_other_instances_reach_the_right_streams() {
        let n = Nudges::local("here".into());
        let (mut a, mut b) = (n.register(1), n.register(2));
        // Another instance's stream 7 asks: every stream here is nudged,
        // with the way back to it.
        n.deliver("ask\tthere\t7\tedge|user=alice");
        for rx in [&mut a, &mut b] {
            let got = rx.try_recv().ok();
            assert_eq!(
                got,
                Some(Nudge {
                    key: "edge|user=alice".into(),
                    from: Origin::There {
                        instance: "there".into(),
                        stream: 7
                    },
                    answer: true
                })
            );
        }
        // This instance's own ask, a nudge back to another instance and
        // garbage are ignored.
        for m in [
            "ask\there\t1\tk",
            "back\tthere\t1\tk",
            "ask\tthere",
            "back\there\tx\tk",
        ] {
            n.deliver(m);
        }
        assert!(a.try_recv().is_err() && b.try_recv().is_err());
        // A nudge back to stream 2 here reaches stream 2 only.
        n.deliver("back\there\t2\tk");
        assert!(b.try_recv().is_ok_and(|x| !x.answer && x.key == "k"));
        assert!(a.try_recv().is_err());
    }
}

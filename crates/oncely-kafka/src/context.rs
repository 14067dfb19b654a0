//! [`KafkaContext`]: the rebalance callbacks of the consumer.

use crate::shared::{Shared, blocking, kafka_err, tpl_of, tps_of};
use crate::tracker::Tp;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// The consumer context: on a revoke, waits for the revoked partitions' in-flight
/// deliveries, then commits what committed; on an assign, starts fresh offset state.
pub struct KafkaContext {
    pub(crate) shared: Arc<Shared>,
}

impl ClientContext for KafkaContext {}

impl ConsumerContext for KafkaContext {
    fn pre_rebalance(&self, base: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let tps = tps_of(tpl);
        self.shared.wait_settled(&tps);
        let positions: Vec<(Tp, i64)> = {
            let mut tracker = self.shared.lock();
            tps.iter()
                .filter_map(|tp| tracker.revoke(tp).map(|o| (tp.clone(), o)))
                .collect()
        };
        if positions.is_empty() {
            info!(partitions = tps.len(), "Kafka: partitions revoked");
            return;
        }
        let result = tpl_of(positions.clone()).and_then(|tpl| {
            blocking(|| base.commit(&tpl, CommitMode::Sync))
                .map_err(|e| kafka_err("commit on revoke", e))
        });
        match result {
            Ok(()) => {
                info!(partitions = tps.len(), committed = ?positions, "Kafka: partitions revoked after committing finished deliveries")
            }
            Err(e) => {
                warn!(error = %e, "Kafka: commit on revoke failed; the new owner will see duplicates")
            }
        }
    }

    fn post_rebalance(&self, base: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let tps = tps_of(tpl);
                info!(partitions = ?tps, "Kafka: partitions assigned");
                self.shared.lock().assign(tps);
                // Where each partition should resume, to catch a broker that skips records.
                match blocking(|| base.committed_offsets((*tpl).clone(), Duration::from_secs(10))) {
                    Ok(committed) => {
                        let mut tracker = self.shared.lock();
                        for e in committed.elements() {
                            if let Offset::Offset(o) = e.offset() {
                                tracker.expect_start(&(e.topic().to_owned(), e.partition()), o);
                            }
                        }
                    }
                    Err(e) => debug!(error = %e, "Kafka: reading committed offsets failed"),
                }
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => warn!(error = %e, "Kafka: rebalance error"),
        }
    }

    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        _offsets: &TopicPartitionList,
    ) {
        if let Err(e) = result {
            debug!(error = %e, "Kafka: commit callback reported an error");
        }
    }
}

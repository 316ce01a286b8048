package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/smssmq/smss/protocol"
)

// QueueSource is implemented by a Source that serves work-queue groups
// (issue 33); the collector exports them when it is. A slave lists none.
type QueueSource interface {
	Queues() []protocol.QueueInfo
}

var (
	descQueuePending  = desc("queue_pending_messages", "Messages of the queue group not yet acknowledged or dead-lettered: backlog, in flight and waiting for redelivery.", "topic", "group")
	descQueueBacklog  = desc("queue_backlog_messages", "Stored messages of the queue group's topic not delivered yet.", "topic", "group")
	descQueueInFlight = desc("queue_in_flight_messages", "Messages delivered to a consumer of the group and not acknowledged, within their ack wait.", "topic", "group")
	descQueueWaiting  = desc("queue_waiting_messages", "Messages of the group waiting to be delivered again (nak'd, or their ack wait passed).", "topic", "group")
	descQueueOldest   = desc("queue_oldest_pending_age_seconds", "Age of the oldest message of the group not yet acknowledged or dead-lettered.", "topic", "group")
	descQueueCons     = desc("queue_consumers", "Consumers connected to the queue group.", "topic", "group")
	descQueueDeliv    = desc("queue_delivered_total", "Deliveries of the group's messages, redeliveries included.", "topic", "group")
	descQueueRedeliv  = desc("queue_redelivered_total", "Deliveries of the group's messages after the first.", "topic", "group")
	descQueueAcked    = desc("queue_acked_total", "Messages of the group acknowledged.", "topic", "group")
	descQueueDead     = desc("queue_dead_lettered_total", "Messages of the group published to its dead-letter topic.", "topic", "group")
	descQueueDropped  = desc("queue_dropped_total", "Messages of the group given up without a dead-letter topic, or removed by retention while pending.", "topic", "group")
	queueDescs        = []*prometheus.Desc{descQueuePending, descQueueBacklog, descQueueInFlight, descQueueWaiting, descQueueOldest,
		descQueueCons, descQueueDeliv, descQueueRedeliv, descQueueAcked, descQueueDead, descQueueDropped}
)

func collectQueues(e *emitter, qs []protocol.QueueInfo) {
	for _, q := range qs {
		t, g := labelValue(q.Topic), labelValue(q.Config.Group)
		e.gauge(descQueuePending, float64(q.Pending), t, g)
		e.gauge(descQueueBacklog, float64(q.Backlog), t, g)
		e.gauge(descQueueInFlight, float64(q.InFlight), t, g)
		e.gauge(descQueueWaiting, float64(q.Waiting), t, g)
		e.gauge(descQueueOldest, float64(q.OldestPendingMs)/1000, t, g)
		e.gauge(descQueueCons, float64(len(q.Consumers)), t, g)
		e.counter(descQueueDeliv, float64(q.Delivered), t, g)
		e.counter(descQueueRedeliv, float64(q.Redelivered), t, g)
		e.counter(descQueueAcked, float64(q.Acked), t, g)
		e.counter(descQueueDead, float64(q.DeadLettered), t, g)
		e.counter(descQueueDropped, float64(q.Dropped), t, g)
	}
}

package main

import (
	"context"
	"log/slog"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/config"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/queue"
	"github.com/smssmq/smss/server"
)

// queueService is the server's view of the queue manager.
type queueService struct{ m *queue.Manager }

func (q queueService) Create(ctx context.Context, topic string, cfg protocol.QueueConfig) (protocol.QueueInfo, error) {
	return q.m.Create(ctx, topic, cfg)
}

func (q queueService) Delete(ctx context.Context, topic, group string) error {
	return q.m.Delete(ctx, topic, group)
}

func (q queueService) Info(topic, group string) ([]protocol.QueueInfo, error) {
	return q.m.Info(topic, group)
}

func (q queueService) Join(topic, group, consumer, addr string, maxInFlight int) (server.QueueConsumer, error) {
	c, err := q.m.Join(topic, group, consumer, addr, maxInFlight)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return c, nil
}

// newQueues builds the queue manager of one run of the node (nil with
// queue.enabled false). It serves once the background jobs of a master
// start it (background.setQueues).
func newQueues(cfg *config.Config, b *broker.Broker, sync queue.Waiter, logger *slog.Logger) *queue.Manager {
	if !cfg.Queue.Enabled {
		return nil
	}
	return queue.New(queue.Options{
		Broker:           b,
		Sync:             sync,
		Logger:           logger.With("component", "queue"),
		MaxGroups:        cfg.Queue.MaxGroups,
		SnapshotRecords:  cfg.Queue.SnapshotRecords,
		SnapshotInterval: cfg.QueueSnapshotInterval(),
		MaxFrameBytes:    int(cfg.Limit.MaxFrameBytes),
	})
}

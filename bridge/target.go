package bridge

import (
	"context"
	"errors"
)

// Target is where the bridge mirrors messages: JetStream or Kafka.
//
// A target is split into lanes, each of which stores messages in the
// order they were sent (a JetStream stream is one lane, a Kafka partition
// is one). A publish that failed may leave a gap before later ones that
// succeeded. The bridge resumes from the last message of every lane
// (Marks): it restarts after the largest "safe" eventId found there and
// skips exactly the messages the lanes' tails already hold (Tail), so a
// crash while publishes were in flight neither loses nor repeats one.
type Target interface {
	// Open connects and makes sure the stream exists. A Target is opened
	// once per session and closed at its end.
	Open(ctx context.Context) error
	// Marks returns the last mirrored message of every lane that holds
	// one. A target whose messages all expired while it once held some
	// returns ErrTargetLost.
	Marks(ctx context.Context) (map[string]Mark, error)
	// Tail returns the eventIds greater than after among the last limit
	// messages of lane.
	Tail(ctx context.Context, lane string, after int64, limit int) ([]int64, error)
	// Publish sends m; the Ack reports when the target stored it. It may
	// block while too many publishes are in flight.
	Publish(ctx context.Context, m *Message) (Ack, error)
	// TopicCreated is called for a create of a mirrored topic when
	// mirrorCreate is set.
	TopicCreated(ctx context.Context, topic string) error
	// Close releases the connection; publishes still in flight fail.
	Close()
	// Describe names the target for logs.
	Describe() string
}

// Ack is the outcome of one Publish.
type Ack interface {
	Wait(ctx context.Context) error
}

// readyAck is an Ack that can tell without blocking whether it settled.
type readyAck interface {
	// Ready returns done=false while the outcome is unknown; once it
	// returned done=true, Wait must not be called.
	Ready() (done bool, err error)
}

// ackReady polls a without blocking when it can; done=false means the
// caller must Wait.
func ackReady(a Ack) (done bool, err error) {
	if r, ok := a.(readyAck); ok {
		return r.Ready()
	}
	return false, nil
}

// ErrTargetLost means the target held mirrored messages that are all gone
// (expired or deleted), so it cannot say where to resume: set "from".
var ErrTargetLost = errors.New("the target no longer holds any mirrored message to resume from")

// ErrForeign means the last message of a lane was not written by the bridge.
var ErrForeign = errors.New("the target holds a message not written by smss-bridge")

// chanAck is an Ack fed by a callback.
type chanAck chan error

// Ready implements readyAck.
func (a chanAck) Ready() (bool, error) {
	select {
	case err := <-a:
		return true, err
	default:
		return false, nil
	}
}

func (a chanAck) Wait(ctx context.Context) error {
	select {
	case err := <-a:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

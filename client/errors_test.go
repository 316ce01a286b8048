package client

import (
	"errors"
	"fmt"
	"testing"

	"github.com/smssmq/smss/protocol"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		msg, topic string
		want       error
	}{
		{"topic not exist", "t", ErrTopicNotExist},
		{"order not exist", "order", ErrTopicNotExist},
		{"topic exist", "", ErrTopicExist},
		{"w1 regiester exist", "t", ErrSubscriberExists},
		{"don't support action", "", ErrNotSupported},
		{"queue groups are not available on this server", "", ErrNotSupported},
		{"just master can pub message", "", ErrNotMaster},
		{"just master can manage topic", "", ErrNotMaster},
		{"just master can manage queue groups", "", ErrNotMaster},
		{"queue groups are served by the master only; this node is not serving them (a slave, or changing role)", "", ErrNotMaster},
		{"topic name MUST be less than 128 char and NOT contains space/enter/tab", "", ErrInvalidTopicName},
		{"invalid topic name: must not be empty", "", ErrInvalidTopicName},
		{"topic name is required", "", ErrInvalidTopicName},
		{"expire MUST more than 10s", "", ErrExpireTooSoon},
		{"delay time must be more than 1 second", "", ErrDelayTooShort},
		{"invalid pub payload", "", ErrInvalidRequest},
		{"invalid delay request", "", ErrInvalidRequest},
		{"payload of 9000000 bytes exceeds limit.maxPayload 8388608", "", ErrLimitExceeded},
		{"EOF", "", ErrEventIDUnavailable},
		{"eventId 99 is beyond the last eventId 7 of this server", "", ErrEventIDUnavailable},
		{"messages after eventId 3 were removed by retention; the oldest retained eventId is 9", "", ErrEventIDUnavailable},
		{"invalid replica eventId", "", ErrEventIDUnavailable},
		{"eventId 1 is older than the oldest retained binlog block (9)", "", ErrEventIDUnavailable},
		{"eventId 3 is inside a binlog block (the block covers 2..4); resume from its first or last eventId", "", ErrEventIDUnavailable},
		{"replication position is gone: file removed", "", ErrEventIDUnavailable},
		{"write not confirmed by 1 slave(s) within 2000 ms; it is stored on the master and may still be replicated", "", ErrWriteNotConfirmed},
	} {
		err := fmt.Errorf("wrapped: %w", toServerError(protocol.NewBizError(tc.msg), tc.topic))
		if !errors.Is(err, tc.want) {
			t.Errorf("%q: not %v", tc.msg, tc.want)
		}
		if !errors.Is(err, protocol.NewBizError(tc.msg)) || errors.Is(err, protocol.NewBizError(tc.msg+"x")) {
			t.Errorf("%q: protocol *BizError not matched by exact text", tc.msg)
		}
		var se *ServerError
		if !errors.As(err, &se) || se.Msg != tc.msg || !IsServerError(err) {
			t.Errorf("%q: not a *ServerError with the text", tc.msg)
		}
	}
	other := newServerError("disk on fire", "t")
	for _, s := range []error{ErrTopicNotExist, ErrTopicExist, ErrSubscriberExists, ErrInvalidRequest} {
		if errors.Is(other, s) {
			t.Errorf("unclassified text matches %v", s)
		}
	}
	if errors.Is(newServerError("x not exist", "t"), ErrTopicNotExist) {
		t.Error("'<other topic> not exist' classified as this topic missing")
	}
	if IsServerError(errors.New("topic not exist")) {
		t.Error("plain error taken for a server reply")
	}
}

package protocol

import "errors"

// BizError is an error whose text is sent to the client verbatim in a 400
// reply (docs/protocol.md §2.3). Existing clients compare these texts, so the sentinels
// below carry the original server's exact wording, typos included.
type BizError struct{ Msg string }

func (e *BizError) Error() string { return e.Msg }

// Is makes a BizError decoded from a reply match the sentinel with the same
// text, so errors.Is works on both sides of the wire.
func (e *BizError) Is(target error) bool {
	t, ok := target.(*BizError)
	return ok && t.Msg == e.Msg
}

// NewBizError returns a BizError carrying msg.
func NewBizError(msg string) *BizError { return &BizError{Msg: msg} }

// Sentinels for the cases callers branch on. Compare with errors.Is.
var (
	ErrTopicNotExist     = NewBizError("topic not exist")
	ErrTopicExist        = NewBizError("topic exist")
	ErrNotSupported      = NewBizError("don't support action")
	ErrSlavePub          = NewBizError("just master can pub message")
	ErrSlaveManage       = NewBizError("just master can manage topic")
	ErrExpireTooSoon     = NewBizError("expire MUST more than 10s")
	ErrTopicNameRequired = NewBizError("topic name is required")
	ErrInvalidPubPayload = NewBizError("invalid pub payload")
	ErrPubSizeTooSmall   = NewBizError("invalid request, payload size must be more than 8")
	ErrInvalidDelay      = NewBizError("invalid delay request")
	ErrDelayTooShort     = NewBizError("delay time must be more than 1 second")
	ErrInvalidReplicaID  = NewBizError("invalid replica eventId")
)

// IsBizError reports whether err (or anything it wraps) is a BizError.
func IsBizError(err error) bool {
	var be *BizError
	return errors.As(err, &be)
}

// ErrTopicDeleted ends a subscription stream because its topic was deleted
// or reaped; the server answers it with a 255 frame (docs/protocol.md §2.7). It is not a
// BizError: nothing is sent as text.
var ErrTopicDeleted = errors.New("topic deleted")

package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/smssmq/smss/protocol"
)

// ServerError is a 400 reply: Msg is the server's text, verbatim.
type ServerError struct {
	Msg  string
	kind errKind
}

type errKind uint8

const (
	kindOther errKind = iota
	kindTopicNotExist
	kindTopicExist
	kindSubscriberExists
	kindNotSupported
	kindNotMaster
	kindInvalidTopicName
	kindExpireTooSoon
	kindDelayTooShort
	kindInvalidRequest
	kindLimitExceeded
	kindEventIDUnavailable
	kindAuthFailed
	kindPermissionDenied
	kindNotConfirmed
	kindFenced
	kindStopping
)

func (e *ServerError) Error() string { return "smss server: " + e.Msg }

// Is matches the sentinels of this package by the kind of error they name,
// and the protocol package's *BizError sentinels by their exact text.
func (e *ServerError) Is(target error) bool {
	switch t := target.(type) {
	case *ServerError:
		return t.kind != kindOther && t.kind == e.kind
	case *protocol.BizError:
		return t.Msg == e.Msg
	}
	return false
}

func sentinel(kind errKind, msg string) *ServerError { return &ServerError{Msg: msg, kind: kind} }

// Sentinels for the server replies callers branch on; compare with errors.Is.
var (
	// ErrTopicNotExist: the topic is unknown, deleted or expired.
	ErrTopicNotExist = sentinel(kindTopicNotExist, "topic not exist")
	// ErrTopicExist: create of a name that already exists.
	ErrTopicExist = sentinel(kindTopicExist, "topic exist")
	// ErrSubscriberExists: another subscriber with the same who is active
	// on the topic on that server ("<who> regiester exist").
	ErrSubscriberExists = sentinel(kindSubscriberExists, "subscriber already registered")
	// ErrNotSupported: the server does not serve this command (e.g. replica
	// on a slave).
	ErrNotSupported = sentinel(kindNotSupported, "don't support action")
	// ErrNotMaster: a write or topic management sent to a slave.
	ErrNotMaster = sentinel(kindNotMaster, "just master can write")
	// ErrInvalidTopicName: the server refused the topic name.
	ErrInvalidTopicName = sentinel(kindInvalidTopicName, "invalid topic name")
	// ErrExpireTooSoon: a topic lifetime under 10 s.
	ErrExpireTooSoon = sentinel(kindExpireTooSoon, "expire MUST more than 10s")
	// ErrDelayTooShort: a delay under 1 s.
	ErrDelayTooShort = sentinel(kindDelayTooShort, "delay time must be more than 1 second")
	// ErrInvalidRequest: the server refused the request's payload.
	ErrInvalidRequest = sentinel(kindInvalidRequest, "invalid request")
	// ErrLimitExceeded: a request over one of the server's size limits.
	ErrLimitExceeded = sentinel(kindLimitExceeded, "limit exceeded")
	// ErrEventIDUnavailable: a subscription or replica start eventId the
	// server cannot resume from (beyond its last id, removed by retention,
	// not a block boundary, ...).
	ErrEventIDUnavailable = sentinel(kindEventIDUnavailable, "eventId unavailable")
	// ErrAuthFailed: the server refused the login (wrong user or password,
	// disabled user, too many failed attempts) or a command before it
	// ("authentication required"): configure Options.Credentials.
	ErrAuthFailed = sentinel(kindAuthFailed, "authentication failed")
	// ErrPermissionDenied: the user may not run this command on this topic
	// (the text names the missing permission).
	ErrPermissionDenied = sentinel(kindPermissionDenied, "permission denied")
	// ErrWriteNotConfirmed: a master with replication.syncSlaves refused to
	// acknowledge a write its slaves did not confirm in time ("write not
	// confirmed by N slave(s) ..."). The write is stored on the master and
	// may still be replicated; a publish with a message id retries it
	// (a dedupe server answers the retry 200 without storing it again).
	ErrWriteNotConfirmed = sentinel(kindNotConfirmed, "write not confirmed")
	// ErrFenced: a cluster master (smss -role auto) refused to acknowledge
	// a write because it is not, or may no longer be, the cluster's master
	// ("fenced: ..."; its lease expired, or a newer epoch elected another
	// node). The write may be stored there but is never delivered unless
	// it is replicated; the client looks for the master again and a
	// publish with a message id retries it there.
	ErrFenced = sentinel(kindFenced, "fenced")
	// ErrServerStopping: the server refused a subscription or a consume
	// because it is stopping ("server shutting down"), as a cluster node
	// does for a moment when it changes role in place. Subscribers and
	// workers reconnect (to another address when given several); nothing
	// was delivered by the refused request.
	ErrServerStopping = sentinel(kindStopping, "server shutting down")
)

// Client-side errors.
var (
	// ErrPoolTimeout: no connection became free within the wait timeout.
	ErrPoolTimeout = errors.New("smss client: timed out waiting for a free connection")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("smss client: closed")
	// ErrEmptyMessage: a message with no header and an empty body (its
	// record would be 8 bytes, which the protocol cannot carry, §1.4).
	ErrEmptyMessage = errors.New("smss client: empty message")
	// ErrNoMessages: a batch call without messages.
	ErrNoMessages = errors.New("smss client: no messages")
	// ErrTopicDeleted: the server ended a subscription (255) because the
	// topic was deleted or expired.
	ErrTopicDeleted = errors.New("smss client: subscription ended: topic deleted or expired")
	// ErrProtocol: the server sent something this client cannot parse; the
	// connection was dropped.
	ErrProtocol = errors.New("smss client: protocol error")
	// ErrNoMaster: none of several addresses is a reachable master (each
	// reachable one reported or proved to be a slave). The error names
	// what each address answered.
	ErrNoMaster = errors.New("smss client: no reachable master")
	// ErrTwoMasters: two reachable masters claim the newest epoch (two
	// slaves promoted by hand, or a slave restarted as a master): writing
	// to either could lose what is written to the other when one rejoins,
	// so the client writes to neither until one follows the other. It
	// wraps ErrNoMaster. A cluster (-role auto) numbers its epochs through
	// its consensus and never has two.
	ErrTwoMasters = fmt.Errorf("%w: two masters claim the newest epoch", ErrNoMaster)
	// ErrRetriesExhausted: a call failed on every attempt its retry budget
	// (Options.MaxRetries) allowed. The error also wraps the last
	// attempt's cause.
	ErrRetriesExhausted = errors.New("smss client: retries exhausted")
)

// newServerError classifies a 400 text. topic is the topic of the request,
// for the sub reply "<topic> not exist".
func newServerError(msg, topic string) *ServerError {
	return &ServerError{Msg: msg, kind: classify(msg, topic)}
}

func classify(msg, topic string) errKind {
	switch msg {
	case protocol.ErrTopicNotExist.Msg:
		return kindTopicNotExist
	case protocol.ErrTopicExist.Msg:
		return kindTopicExist
	case protocol.ErrNotSupported.Msg,
		// A server with work queues turned off (queue.enabled false).
		"queue groups are not available on this server":
		return kindNotSupported
	case protocol.ErrSlavePub.Msg, protocol.ErrSlaveManage.Msg:
		return kindNotMaster
	case protocol.ErrExpireTooSoon.Msg:
		return kindExpireTooSoon
	case protocol.ErrDelayTooShort.Msg:
		return kindDelayTooShort
	case protocol.ErrTopicNameRequired.Msg,
		"topic name MUST be less than 128 char and NOT contains space/enter/tab":
		return kindInvalidTopicName
	case protocol.ErrInvalidPubPayload.Msg, protocol.ErrPubSizeTooSmall.Msg, protocol.ErrInvalidDelay.Msg:
		return kindInvalidRequest
	case "server shutting down", "the server is shutting down":
		return kindStopping
	case protocol.ErrInvalidReplicaID.Msg, "EOF", "invalid pos", "can't find event id",
		"can't find event id,because file not exist", "found event id,but expired":
		return kindEventIDUnavailable
	}
	switch {
	case topic != "" && msg == topic+" not exist":
		return kindTopicNotExist
	case strings.HasSuffix(msg, " regiester exist"):
		return kindSubscriberExists
	case strings.HasPrefix(msg, "invalid topic name"):
		return kindInvalidTopicName
	case strings.HasPrefix(msg, "just master can "),
		strings.HasPrefix(msg, "queue groups are served by the master only"):
		// A slave's refusal of a write of any kind (pub, topic, queue
		// groups): "just master can pub message", "... manage topic", ...;
		// and a node not serving queue groups (a slave, a master
		// stopping or changing role).
		return kindNotMaster
	case strings.HasPrefix(msg, "write not confirmed"):
		return kindNotConfirmed
	case strings.HasPrefix(msg, protocol.FencedPrefix):
		return kindFenced
	case strings.HasPrefix(msg, "permission denied:"):
		return kindPermissionDenied
	case strings.HasPrefix(msg, "authentication "), strings.HasPrefix(msg, "too many failed authentication"),
		strings.HasSuffix(msg, "is disabled") && strings.HasPrefix(msg, "user "),
		strings.HasSuffix(msg, "no longer exists") && strings.HasPrefix(msg, "user "):
		return kindAuthFailed
	case strings.Contains(msg, "exceeds limit."):
		return kindLimitExceeded
	case strings.HasPrefix(msg, "invalid eventId"),
		strings.Contains(msg, "is beyond the last eventId"),
		strings.Contains(msg, "removed by retention"),
		strings.Contains(msg, "is older than the oldest retained"),
		strings.Contains(msg, "is inside a binlog block"),
		strings.HasPrefix(msg, "subscription position is gone"),
		strings.HasPrefix(msg, "replication position is gone"):
		return kindEventIDUnavailable
	}
	return kindOther
}

// toServerError converts a protocol *BizError (a 400 reply) into a
// *ServerError; other errors are returned unchanged.
func toServerError(err error, topic string) error {
	var be *protocol.BizError
	if errors.As(err, &be) {
		return newServerError(be.Msg, topic)
	}
	return err
}

// IsServerError reports whether err is (or wraps) a 400 reply. A connection
// stays usable after one.
func IsServerError(err error) bool {
	var se *ServerError
	return errors.As(err, &se)
}

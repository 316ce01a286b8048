package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// Security configures authentication and the TLS listener of a Server. The
// zero value turns both off: every client may do everything, as with the
// original protocol, and the handshake commands are answered with
// protocol.ErrAuthDisabled.
type Security struct {
	// Auth, when set, makes every command except alive (17) and the
	// handshake (32, 33) wait for a successful SCRAM-SHA-256 handshake, and
	// checks the user's permissions on every command.
	Auth *auth.Authenticator
	// TLS, when set, adds a listener on TLSListen ("host:port"; port 0
	// picks a free one) whose connections are TLS. The plain listener on
	// Host:Port stays.
	TLS       *tls.Config
	TLSListen string
	// LoginTimeout, with Auth set, closes a connection that has not logged
	// in this long after it was accepted, whatever it sends meanwhile
	// (alive included): an unauthenticated client cannot hold a slot.
	// Zero means DefaultLoginTimeout.
	LoginTimeout time.Duration
}

// DefaultLoginTimeout is Security.LoginTimeout's default
// (auth.loginTimeoutMs).
const DefaultLoginTimeout = 10 * time.Second

// preAuthMaxTopic bounds the topic field of a request read before login:
// longer is refused unread and the connection closed, so a client that
// has not logged in cannot make the server allocate and hold the 64 KiB a
// topic field may declare. It is twice the longest valid topic name; the
// mechanism name of auth start is far shorter.
const preAuthMaxTopic = 2 * protocol.MaxTopicNameLen

// preAuthLimits bound what a client that has not authenticated can make the
// server read and allocate: a longer request is refused and the connection
// closed.
var preAuthLimits = protocol.Limits{MaxPayload: 64, MaxWho: 64, MaxRecords: 1, MaxDiscard: -1}

// preAuthBufferSize is the read buffer of a connection that has not logged
// in: a client that never logs in holds 1 KiB of it, not readBufferSize.
const preAuthBufferSize = 1 << 10

// connAuth is a connection's authentication state; only its goroutine
// touches it, except that ReloadUsers reads it under s.mu while the
// connection is in stateIdle or stateStream (it is written only in
// stateActive).
type connAuth struct {
	key string // limiter key: the remote IP (IPv6: its /64)
	// loginBy is when a connection that has not logged in is closed.
	loginBy time.Time
	// identity is the logged-in account's (auth.Principal.Identity): a
	// user removed and re-created, or whose password changed, is another
	// account and ends the connection.
	identity string
	full     *protocol.RequestReader // reader with the configured limits, used once authenticated
	conv     *auth.Conversation      // between auth start and auth continue
	user     string                  // "" until authenticated
	// principal is the user as of the request being served (the snapshot
	// current when it was checked).
	principal *auth.Principal
	// What the request being served (a stream, possibly) needs, for
	// ReloadUsers to close streams whose user lost it.
	perm  auth.Permission
	topic string
}

// initAuth starts an authenticating connection with the pre-auth limits.
func (c *conn) initAuth() {
	if c.s.opts.Security.Auth == nil {
		return
	}
	c.auth.key = c.ipKey
	c.auth.loginBy = time.Now().Add(c.s.opts.Security.LoginTimeout)
	c.rr = protocol.NewRequestReader(c.br, preAuthLimits)
}

// gate applies authentication and permissions to the request just read
// (err is what RequestReader.Read returned). handled reports that it
// answered the request itself, and keep then whether the connection goes
// on; otherwise the request continues on the normal path, which also deals
// with I/O errors.
func (c *conn) gate(err error, start time.Time) (handled, keep bool) {
	a := c.s.opts.Security.Auth
	cmd := c.req.Header.Cmd
	var re *protocol.RequestError
	if err != nil && !errors.As(err, &re) {
		return false, false
	}
	if cmd == protocol.CmdAuthStart || cmd == protocol.CmdAuthContinue {
		switch {
		case re != nil:
			return false, false // too long: refused and closed by the normal path
		case a == nil:
			return true, c.refuse(protocol.ErrAuthDisabled, false, start)
		}
		return true, c.authStep(a, start)
	}
	if a == nil || cmd == protocol.CmdAlive {
		return false, false
	}
	if c.auth.user == "" {
		// A request too long for the pre-auth limits was not read: close.
		return true, c.refuse(protocol.ErrAuthRequired, re != nil && re.Close, start)
	}
	p := a.Store.Lookup(c.auth.user)
	if p == nil || p.Disabled || p.Identity() != c.auth.identity {
		msg := fmt.Sprintf("user %q is disabled", c.auth.user)
		switch {
		case p == nil:
			msg = fmt.Sprintf("user %q no longer exists", c.auth.user)
		case p.Identity() != c.auth.identity:
			msg = fmt.Sprintf("the credentials of user %q changed (password changed, or the user was re-created); log in again", c.auth.user)
		}
		c.log.Warn("refusing a command of a user that was disabled, removed or changed; closing the connection", "user", c.auth.user)
		return true, c.refuse(protocol.NewBizError(msg), true, start)
	}
	c.auth.principal = p
	if re != nil && re.Close {
		return false, false
	}
	perm, perTopic := auth.CommandPermission(cmd)
	topic := ""
	if perTopic {
		topic = string(c.req.Topic)
	}
	if !p.Allowed(perm, topic) {
		denied := auth.Denied(p.Name, perm, topic)
		switch cmd {
		case protocol.CmdCursorList, protocol.CmdCursorSet, protocol.CmdCursorReset:
			denied = protocol.NewBizError(fmt.Sprintf("permission denied: user %q may not list or change stored positions (needs the admin role)", p.Name))
		}
		c.log.Warn("permission denied", c.attrs(denied.Msg, start)...)
		// The request's bytes were consumed: the connection stays in step.
		return true, c.refuse(denied, false, start)
	}
	c.auth.perm, c.auth.topic = perm, topic
	return false, false
}

// authStep serves auth start (32) and auth continue (33).
func (c *conn) authStep(a *auth.Authenticator, start time.Time) bool {
	req := &c.req
	if req.Header.Cmd == protocol.CmdAuthStart {
		c.auth.conv = nil
		if c.auth.user != "" {
			return c.refuse(protocol.ErrAuthDone, false, start)
		}
		// Locked out, or starting handshakes too fast: refused unheard.
		if wait, ok := a.Limiter.Start(c.auth.key); !ok {
			return c.lockedOut(wait, start)
		}
		conv, msg, err := a.Start(string(req.Topic), req.Payload)
		if err != nil {
			return c.authFailed(nil, err, start)
		}
		c.auth.conv = conv
		return c.replyAuth(msg, start)
	}
	conv := c.auth.conv
	c.auth.conv = nil
	if conv == nil {
		return c.refuse(protocol.ErrAuthNoStart, false, start)
	}
	// The lockout is checked and counted here, where the proof is
	// verified: a client cannot start many handshakes before its lockout
	// and finish them all during it. Locked out, the proof is not looked at.
	att, wait, ok := a.Limiter.Begin(c.auth.key, conv.User())
	if !ok {
		return c.lockedOut(wait, start)
	}
	p, msg, err := conv.Finish(req.Payload)
	if err != nil {
		return c.authFailed(att, err, start)
	}
	att.Succeed()
	c.auth.user = p.Name
	c.auth.identity = p.Identity()
	c.growReader()
	c.log = c.log.With("user", p.Name)
	c.log.Info("authenticated", "elapsed", time.Since(start))
	return c.replyAuth(msg, start)
}

// growReader replaces the small pre-login read buffer by a full-size one
// with the configured limits, keeping the bytes already buffered (a client
// may send its first request right behind auth continue).
func (c *conn) growReader() {
	var src io.Reader = &c.dr
	if n := c.br.Buffered(); n > 0 {
		rest, _ := c.br.Peek(n)
		src = &prefixReader{buf: bytes.Clone(rest), r: &c.dr}
	}
	c.br = bufio.NewReaderSize(src, readBufferSize)
	c.rr = protocol.NewRequestReader(c.br, c.s.opts.Limits)
}

// prefixReader reads buf, then r.
type prefixReader struct {
	buf []byte
	r   io.Reader
}

func (p *prefixReader) Read(b []byte) (int, error) {
	if len(p.buf) == 0 {
		return p.r.Read(b)
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	return n, nil
}

// authFailed answers a failed handshake step; att, the verification that
// failed (nil for a malformed start, which verified nothing), counts
// against the address and the user. The log names the claimed user and the
// reason, never message contents (the proof is derived from the password).
func (c *conn) authFailed(att *auth.Attempt, err error, start time.Time) bool {
	text := protocol.ErrAuthFailed
	user, reason := "", err.Error()
	var f *auth.Failure
	if errors.As(err, &f) {
		text, user, reason = f.Client, f.User, f.Reason
	}
	lockout := att.Fail()
	c.log.Warn("authentication failed", "user", user, "reason", reason, "lockout", lockout)
	return c.refuse(text, false, start)
}

// lockedOut refuses a handshake step of a locked-out (or too eager)
// address without looking at it.
func (c *conn) lockedOut(wait time.Duration, start time.Time) bool {
	secs := max(int64(math.Ceil(wait.Seconds())), 1)
	if c.s.sampler.sample() {
		c.log.Warn("handshake refused: address locked out after failed attempts, or starting handshakes too fast", "retryAfter", wait)
	}
	return c.refuse(protocol.NewBizError(fmt.Sprintf("too many failed authentication attempts; retry in %ds", secs)), false, start)
}

// preAuthGate refuses, before reading it, a request of a connection that
// has not logged in whose topic field is longer than preAuthMaxTopic, and
// closes the connection. handled reports that it answered.
func (c *conn) preAuthGate(start time.Time) (handled, keep bool) {
	if c.s.opts.Security.Auth == nil || c.auth.user != "" {
		return false, false
	}
	b, err := c.br.Peek(protocol.HeaderSize)
	if err != nil {
		return false, false // RequestReader.Read meets the same error
	}
	h := protocol.ParseHeader((*[protocol.HeaderSize]byte)(b))
	if int(h.TopicLen) <= preAuthMaxTopic {
		return false, false
	}
	c.req = protocol.Request{Header: h}
	return true, c.refuse(protocol.ErrAuthRequired, true, start)
}

// loginExpired reports whether the connection has not logged in by its
// login deadline, and logs it.
func (c *conn) loginExpired() bool {
	if c.s.opts.Security.Auth == nil || c.auth.user != "" || time.Now().Before(c.auth.loginBy) {
		return false
	}
	c.log.Info("closing a connection that did not log in within auth.loginTimeoutMs",
		"loginTimeout", c.s.opts.Security.LoginTimeout)
	return true
}

// readUntil is the latest a read may wait: the login deadline of a
// connection that has not logged in, else zero (no cap).
func (c *conn) readUntil() time.Time {
	if c.s.opts.Security.Auth == nil || c.auth.user != "" {
		return time.Time{}
	}
	return c.auth.loginBy
}

func (c *conn) replyAuth(msg []byte, start time.Time) bool {
	out, err := protocol.AppendReplyJSON(c.out[:0], msg)
	if err != nil {
		return c.refuse(protocol.ErrAuthFailed, true, start)
	}
	c.out = out
	c.s.opts.Metrics.ObserveRequest(c.req.Header.Cmd, time.Since(start), true)
	return c.write(c.s.opts.WriteTimeout)
}

// refuse answers the current request with a 400 carrying be; closeAfter
// closes the connection after the reply.
func (c *conn) refuse(be *protocol.BizError, closeAfter bool, start time.Time) bool {
	c.s.opts.Metrics.ObserveRequest(c.req.Header.Cmd, time.Since(start), false)
	c.s.opts.Metrics.Error(metrics.KindBusiness)
	if closeAfter {
		c.log.Warn("refusing request and closing connection", c.attrs(be.Msg, start)...)
	} else if c.s.sampler.sample() {
		c.log.Info("request refused", c.attrs(be.Msg, start)...)
	}
	c.out = protocol.AppendReplyError(c.out[:0], be.Msg)
	if !c.write(c.s.opts.WriteTimeout) {
		return false
	}
	if closeAfter {
		c.linger()
		return false
	}
	return true
}

// visibleTopics filters a list (100) reply to the topics the user holds a
// grant on; without authentication, or for an admin, it is the whole list.
func (c *conn) visibleTopics(topics []protocol.TopicInfo, err error) ([]protocol.TopicInfo, error) {
	p := c.auth.principal
	if err != nil || c.s.opts.Security.Auth == nil || p == nil || p.Admin {
		return topics, err
	}
	out := make([]protocol.TopicInfo, 0, len(topics))
	for _, t := range topics {
		if p.Allowed(auth.PermDescribe, t.Name) {
			out = append(out, t)
		}
	}
	return out, nil
}

// ReloadUsers re-reads the users file without dropping connections: every
// connection's next command is checked against the new users, and
// subscription or replication streams whose user lost the permission they
// need (or was disabled or removed) are closed at once. On error the users
// in force do not change.
func (s *Server) ReloadUsers() error {
	a := s.opts.Security.Auth
	if a == nil {
		return errors.New("server: authentication is not enabled")
	}
	if err := a.Store.Reload(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		// The connection's goroutine set its auth fields before it moved to
		// idle or stream (under s.mu) and does not touch them there.
		if (c.state != stateStream && c.state != stateIdle) || c.auth.user == "" {
			continue
		}
		p := a.Store.Lookup(c.auth.user)
		if p != nil && p.Identity() != c.auth.identity {
			// Re-created or with a new password: another account. (A
			// disabled or removed user's idle connection is refused, with
			// a reason, on its next command.)
			s.log.Warn("closing a connection whose user was re-created or got new credentials", "user", c.auth.user,
				"remote", c.nc.RemoteAddr().String())
			c.nc.Close()
			continue
		}
		if c.state == stateStream && !p.Allowed(c.auth.perm, c.auth.topic) {
			s.log.Warn("closing a stream whose user lost its permission", "user", c.auth.user,
				"remote", c.nc.RemoteAddr().String(), "permission", c.auth.perm.String(), "topic", c.auth.topic)
			c.nc.Close()
		}
	}
	return nil
}

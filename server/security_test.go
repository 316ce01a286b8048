package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdg-go/scram"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/protocol"
)

// Attacks of issue 18 against a real server over TCP.

var lockedOutRe = regexp.MustCompile(`^too many failed authentication attempts; retry in \d+s$`)

// halfLogin sends an auth start for user on c and returns the client-final
// message that would finish it.
func halfLogin(t *testing.T, c net.Conn, user, password string) []byte {
	t.Helper()
	cl, err := scram.SHA256.NewClient(user, password, "")
	if err != nil {
		t.Fatal(err)
	}
	conv := cl.NewConversation()
	first, err := conv.Step("")
	if err != nil {
		t.Fatal(err)
	}
	reply, err := call(t, c, enc(protocol.AppendAuthStart(nil, protocol.MechSCRAMSHA256, []byte(first))), protocol.ReplyJSON)
	if err != nil {
		t.Fatalf("auth start: %v", err)
	}
	final, err := conv.Step(string(reply))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(final)
}

// isReset reports a connection reset by the server.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// The attack of High 1: auth starts on many connections first, then every
// guess. Only the free failures may be verified; the rest, the right
// password among them, are refused during the lockout.
func TestLockoutCheckedWhereTheProofIsVerified(t *testing.T) {
	const free = 3
	lim := auth.NewLimiter(auth.LimiterOptions{Free: free, AddressFree: 100, BaseDelay: time.Minute})
	s := startSecure(t, lim, authtest.User{Name: "alice", Password: "right", Roles: []string{auth.RoleAdmin}})
	type half struct {
		c     net.Conn
		final []byte
		pw    string
	}
	var halves []half
	for i := range 8 {
		pw := fmt.Sprint("guess", i)
		if i == 7 {
			pw = "right"
		}
		c := s.dial(t)
		halves = append(halves, half{c, halfLogin(t, c, "alice", pw), pw})
	}
	for i, h := range halves {
		_, err := call(t, h.c, enc(protocol.AppendAuthContinue(nil, h.final)), protocol.ReplyJSON)
		var be *protocol.BizError
		switch {
		case i < free:
			if !errors.Is(err, protocol.ErrAuthFailed) {
				t.Fatalf("guess %d: %v, want authentication failed", i, err)
			}
		case !errors.As(err, &be) || !lockedOutRe.MatchString(be.Msg):
			t.Fatalf("guess %d (password %q) during the lockout: %v, want refused unheard", i, h.pw, err)
		}
	}
	// Nothing logged in.
	send(t, halves[7].c, pubReq("orders", record("x")))
	expect(t, halves[7].c, errReply("authentication required"))
}

// A connection that has not logged in within the login timeout is closed,
// whatever it sends meanwhile; one that logged in stays.
func TestLoginTimeoutClosesUnauthenticated(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s := startSecureWith(t, nil, func(o *Options) { o.Security.LoginTimeout = timeout },
		authtest.User{Name: "alice", Password: "pw", Roles: []string{auth.RoleAdmin}})
	trickle := &trickler{rest: enc(protocol.AppendDelete(nil, make([]byte, 200), nil))}
	cases := []struct {
		name string
		keep func(t *testing.T, c net.Conn) error // one step; an error ends the loop
	}{
		{"alive", func(t *testing.T, c net.Conn) error {
			if _, err := c.Write(aliveReq()); err != nil {
				return err
			}
			_, err := protocol.ReadReply(c, protocol.ReplyPlain, 1<<10)
			return err
		}},
		{"silent", func(t *testing.T, c net.Conn) error {
			var b [1]byte
			_, err := c.Read(b[:])
			return err
		}},
		{"half handshake", func(t *testing.T, c net.Conn) error {
			cl, _ := scram.SHA256.NewClient("alice", "pw", "")
			first, _ := cl.NewConversation().Step("")
			if _, err := c.Write(enc(protocol.AppendAuthStart(nil, protocol.MechSCRAMSHA256, []byte(first)))); err != nil {
				return err
			}
			_, err := protocol.ReadReply(c, protocol.ReplyJSON, protocol.MaxAuthMessage)
			return err
		}},
		{"trickled request", func(t *testing.T, c net.Conn) error {
			// A delete with a valid-length topic, one byte per 20 ms: the
			// read deadline of the request, not the login timeout, would
			// otherwise bound it.
			if _, err := c.Write(trickle.next()); err != nil {
				return err
			}
			var b [1]byte
			c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			_, err := c.Read(b[:])
			c.SetReadDeadline(time.Now().Add(testDeadline))
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			if err == nil {
				return fmt.Errorf("unexpected reply byte %#x", b[0])
			}
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := s.dial(t)
			start := time.Now()
			var err error
			for err == nil && time.Since(start) < testDeadline {
				err = tc.keep(t, c)
			}
			if err == nil {
				t.Fatalf("still open after %v", time.Since(start))
			}
			if !errors.Is(err, io.EOF) && !isReset(err) {
				t.Fatalf("ended with %v, want the server to close", err)
			}
			if el := time.Since(start); el < timeout-50*time.Millisecond {
				t.Fatalf("closed after %v, before the %v login timeout", el, timeout)
			}
		})
	}
	// Logged in before the deadline: the connection outlives it.
	c := s.dial(t)
	if err := login(t, c, "alice", "pw"); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 2*timeout; {
		send(t, c, aliveReq())
		expect(t, c, aliveReply())
	}
	send(t, c, pubReq("orders", record("x")))
	expect(t, c, okReply())
}

// High 3: one address cannot take every connection slot.
func TestMaxConnsPerIPRefusedAtAccept(t *testing.T) {
	ts := startServer(t, newFakeBackend(), func(o *Options) { o.MaxConnsPerIP = 3 })
	var held []net.Conn
	for range 3 {
		c := ts.dial(t)
		send(t, c, aliveReq())
		expect(t, c, aliveReply())
		held = append(held, c)
	}
	over := ts.dial(t)
	over.Write(aliveReq()) // may fail: the server closes at accept
	if _, err := protocol.ReadReply(over, protocol.ReplyPlain, 1<<10); err == nil {
		t.Fatal("a 4th connection from one address was served")
	}
	// Another address keeps its slots (Linux routes all of 127/8 to lo).
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: testDeadline}
	other, err := d.Dial("tcp", ts.Addr().String())
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.2: %v", err)
	}
	defer other.Close()
	other.SetDeadline(time.Now().Add(testDeadline))
	send(t, other, aliveReq())
	expect(t, other, aliveReply())
	// A slot freed is a slot again, once the server has seen the close.
	held[0].Close()
	deadline := time.Now().Add(testDeadline)
	for {
		c := ts.dial(t)
		c.Write(aliveReq())
		if _, err := protocol.ReadReply(c, protocol.ReplyPlain, 1<<10); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the freed slot was never given back")
		}
	}
}

// High 3: before login, a request declaring a 64 KiB topic field is
// refused before the field is read (or allocated), and the connection
// closed at once.
func TestPreAuthTopicFieldNotRead(t *testing.T) {
	s := startSecure(t, nil, authtest.User{Name: "alice", Password: "pw"})
	for _, cmd := range []protocol.Command{protocol.CmdDelete, protocol.CmdTopicInfo, protocol.CmdAuthStart, protocol.CmdAlive, protocol.CmdCreate} {
		t.Run(cmd.String(), func(t *testing.T) {
			c := s.dial(t)
			h := protocol.Header{Cmd: cmd, TopicLen: 0xffff}
			send(t, c, h.AppendTo(nil)) // and nothing of the 64 KiB
			// A prompt answer: the server does not wait for the field.
			c.SetReadDeadline(time.Now().Add(DefaultReadTimeout / 2))
			expect(t, c, errReply("authentication required"))
			expectClosed(t, c)
		})
	}
	// A topic of a valid length is still read and refused, the connection
	// kept.
	c := s.dial(t)
	send(t, c, enc(protocol.AppendTopicInfo(nil, make([]byte, protocol.MaxTopicNameLen), nil)))
	expect(t, c, errReply("authentication required"))
	send(t, c, aliveReq())
	expect(t, c, aliveReply())
}

// A session is bound to the account, not its name: a user removed and
// re-created (even with the same password), or whose password changed,
// ends the other sessions at the reload.
func TestSessionEndsWhenTheAccountChanges(t *testing.T) {
	cases := []struct {
		name  string
		after authtest.User
	}{
		{"re-created", authtest.User{Name: "bob", Password: "pw", Roles: []string{auth.RoleAdmin}, Fresh: true}},
		{"password changed", authtest.User{Name: "bob", Password: "new", Roles: []string{auth.RoleAdmin}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := authtest.User{Name: "bob", Password: "pw", Publish: []string{"other"}}
			s := startSecure(t, nil, before)
			idle, busy := s.dial(t), s.dial(t)
			for _, c := range []net.Conn{idle, busy} {
				if err := login(t, c, "bob", "pw"); err != nil {
					t.Fatal(err)
				}
			}
			send(t, busy, pubReq("other", record("x")))
			expect(t, busy, okReply())
			// Granted more under the same name.
			authtest.WriteUsers(t, s.users, tc.after)
			if err := s.ReloadUsers(); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, idle)
			// A request racing the reload is refused, not served with the
			// new account's rights.
			busy.Write(pubReq("orders", record("x")))
			if reply, err := protocol.ReadReply(busy, protocol.ReplyPlain, 1<<10); err == nil {
				t.Fatalf("old session published with the new account's rights: %q", reply)
			}
		})
	}
	// The same account rewritten (grants changed, credentials kept) keeps
	// its sessions.
	s := startSecure(t, nil, authtest.User{Name: "carol", Password: "pw", Publish: []string{"other"}})
	c := s.dial(t)
	if err := login(t, c, "carol", "pw"); err != nil {
		t.Fatal(err)
	}
	authtest.WriteUsers(t, s.users, authtest.User{Name: "carol", Password: "pw", Publish: []string{"orders"}})
	if err := s.ReloadUsers(); err != nil {
		t.Fatal(err)
	}
	send(t, c, pubReq("orders", record("x")))
	expect(t, c, okReply())
}

// trickler hands out a request one byte at a time.
type trickler struct{ rest []byte }

func (tr *trickler) next() []byte {
	if len(tr.rest) == 0 {
		return []byte{0}
	}
	b := tr.rest[:1]
	tr.rest = tr.rest[1:]
	return b
}

// TLS 1.2 is offered with AEAD cipher suites only: a client that speaks
// only CBC suites is refused, one with GCM or ChaCha20 is served.
func TestTLS12AEADOnly(t *testing.T) {
	s := startSecure(t, nil, authtest.User{Name: "alice", Password: "pw"})
	dial := func(suite uint16) error {
		cfg := s.pki.ClientConfig(t, false)
		cfg.MaxVersion = tls.VersionTLS12
		cfg.CipherSuites = []uint16{suite}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: testDeadline}, "tcp", s.TLSAddr().String(), cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(testDeadline))
		if _, err := call(t, c, aliveReq(), protocol.ReplyPlain); err != nil {
			t.Fatalf("alive over %s: %v", tls.CipherSuiteName(suite), err)
		}
		return nil
	}
	for _, tc := range []struct {
		suite uint16
		ok    bool
	}{
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, true},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, true},
		{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, true},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, false},
	} {
		err := dial(tc.suite)
		if (err == nil) != tc.ok {
			t.Errorf("TLS 1.2 with %s: %v, want accepted=%v", tls.CipherSuiteName(tc.suite), err, tc.ok)
		}
	}
}

// Auth starts count toward the rate limit: past the burst, starts from
// the address are refused unheard.
func TestAuthStartsRateLimited(t *testing.T) {
	lim := auth.NewLimiter(auth.LimiterOptions{StartRate: 0.01, StartBurst: 5})
	s := startSecure(t, lim, authtest.User{Name: "alice", Password: "pw"})
	c := s.dial(t)
	start := enc(protocol.AppendAuthStart(nil, protocol.MechSCRAMSHA256, []byte("n,,n=mallory,r=abcdefgh")))
	for i := range 5 {
		if _, err := call(t, c, start, protocol.ReplyJSON); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
	}
	for i := range 3 {
		_, err := call(t, c, start, protocol.ReplyJSON)
		var be *protocol.BizError
		if !errors.As(err, &be) || !lockedOutRe.MatchString(be.Msg) {
			t.Fatalf("start %d past the burst: %v", 5+i, err)
		}
	}
	// The refused starts verified nothing, and the connection is in step.
	send(t, c, aliveReq())
	expect(t, c, aliveReply())
}

// Lockout bypasses of issue 18: a success of another user does not reset
// the address's count, and guessing one password per user name still
// reaches the address's limit.
func TestAddressLockoutNotResetByAnotherUser(t *testing.T) {
	lim := auth.NewLimiter(auth.LimiterOptions{Free: 100, AddressFree: 3, BaseDelay: time.Minute})
	s := startSecure(t, lim,
		authtest.User{Name: "mallory", Password: "mine", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "u1", Password: "x1"}, authtest.User{Name: "u2", Password: "x2"}, authtest.User{Name: "u3", Password: "x3"})
	for i, step := range []struct{ user, pw, want string }{
		{"u1", "guess", "fail"},
		{"mallory", "mine", "ok"}, // the attacker's own account
		{"u2", "guess", "fail"},
		{"mallory", "mine", "ok"},
		{"u3", "guess", "fail"}, // the address's third failure: locked out
		{"u3", "x3", "locked"},
		{"mallory", "mine", "locked"},
	} {
		err := login(t, s.dial(t), step.user, step.pw)
		var be *protocol.BizError
		switch step.want {
		case "ok":
			if err != nil {
				t.Fatalf("step %d (%s): %v", i, step.user, err)
			}
		case "fail":
			if !errors.Is(err, protocol.ErrAuthFailed) {
				t.Fatalf("step %d (%s): %v, want authentication failed", i, step.user, err)
			}
		case "locked":
			if !errors.As(err, &be) || !lockedOutRe.MatchString(be.Msg) {
				t.Fatalf("step %d (%s): %v, want the address locked out", i, step.user, err)
			}
		}
	}
}

// FuzzPreAuthBytes sends arbitrary bytes to a server with authentication
// on, as a client that never logged in: the server must not panic, must
// change nothing, and must close the connection by the login deadline.
func FuzzPreAuthBytes(f *testing.F) {
	f.Add(aliveReq())
	f.Add(pubReq("orders", record("x")))
	f.Add(protocol.Header{Cmd: protocol.CmdDelete, TopicLen: 0xffff}.AppendTo(nil))
	f.Add(protocol.Header{Cmd: protocol.CmdAuthStart, TopicLen: 13}.AppendTo(nil))
	f.Add(enc(protocol.AppendAuthStart(nil, protocol.MechSCRAMSHA256, []byte("n,,n=alice,r=abc"))))
	f.Add(enc(protocol.AppendAuthContinue(nil, []byte("c=biws,r=abc,p=AAAA"))))
	f.Add(append(aliveReq(), createReq("x", 0)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		const loginTimeout = 300 * time.Millisecond
		s := startSecureWith(t, nil, func(o *Options) { o.Security.LoginTimeout = loginTimeout },
			authtest.User{Name: "alice", Password: "pw", Roles: []string{auth.RoleAdmin}})
		before := s.backend.next()
		c := s.dial(t)
		start := time.Now()
		c.Write(data) // may fail once the server has closed
		c.SetReadDeadline(time.Now().Add(testDeadline))
		_, err := io.Copy(io.Discard, c)
		if err != nil && !isReset(err) {
			t.Fatalf("connection not closed by the server: %v", err)
		}
		if el := time.Since(start); el > loginTimeout+5*time.Second {
			t.Fatalf("closed after %v, login timeout %v", el, loginTimeout)
		}
		if got := s.backend.next(); got != before {
			t.Fatalf("an unauthenticated client changed the backend: next id %d -> %d", before, got)
		}
	})
}

// Before login a connection holds a small read buffer; at login it grows
// without losing what the client sent right behind auth continue.
func TestRequestsPipelinedBehindLogin(t *testing.T) {
	s := startSecure(t, nil, authtest.User{Name: "alice", Password: "pw", Roles: []string{auth.RoleAdmin}})
	c := s.dial(t)
	final := halfLogin(t, c, "alice", "pw")
	big := record(strings.Repeat("b", 100<<10)) // far past the pre-login buffer
	var w []byte
	w = append(w, enc(protocol.AppendAuthContinue(nil, final))...)
	w = append(w, pubReq("orders", record("x"))...)
	w = append(w, pubReq("orders", big)...)
	w = append(w, aliveReq()...)
	send(t, c, w)
	if _, err := protocol.ReadReply(c, protocol.ReplyJSON, protocol.MaxAuthMessage); err != nil {
		t.Fatalf("login: %v", err)
	}
	expect(t, c, okReply())
	expect(t, c, okReply())
	expect(t, c, aliveReply())
}

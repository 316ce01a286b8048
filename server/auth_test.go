package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/protocol"
)

// secServer is a test server with authentication on, a users file on disk
// and a TLS listener beside the plain one.
type secServer struct {
	*testServer
	pki   *authtest.PKI
	users string
	auth  *auth.Authenticator
}

func startSecure(t *testing.T, lim *auth.Limiter, users ...authtest.User) *secServer {
	t.Helper()
	return startSecureWith(t, lim, nil, users...)
}

// startSecureWith is startSecure with tweak applied to the options last.
func startSecureWith(t *testing.T, lim *auth.Limiter, tweak func(*Options), users ...authtest.User) *secServer {
	t.Helper()
	pki := authtest.NewPKI(t)
	path := filepath.Join(t.TempDir(), "users.json")
	authtest.WriteUsers(t, path, users...)
	store, err := auth.OpenStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator(store, lim)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, newFakeBackend(), func(o *Options) {
		o.Security = Security{Auth: a, TLS: pki.ServerConfig(t, false), TLSListen: "127.0.0.1:0"}
		o.AliveInterval = 20 * time.Millisecond
		if tweak != nil {
			tweak(o)
		}
	})
	for _, name := range []string{"orders", "other"} {
		if _, err := ts.backend.CreateTopic(context.Background(), []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}
	return &secServer{testServer: ts, pki: pki, users: path, auth: a}
}

// connect opens a connection to the plain or the TLS listener.
func (s *secServer) connect(t *testing.T, useTLS bool) net.Conn {
	t.Helper()
	if !useTLS {
		return s.dial(t)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: testDeadline}, "tcp", s.TLSAddr().String(), s.pki.ClientConfig(t, false))
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(testDeadline))
	t.Cleanup(func() { c.Close() })
	return c
}

func login(t *testing.T, c net.Conn, user, password string) error {
	t.Helper()
	cl, err := auth.NewClient(user, password)
	if err != nil {
		t.Fatal(err)
	}
	return cl.Login(c)
}

func call(t *testing.T, c net.Conn, req []byte, kind protocol.ReplyKind) ([]byte, error) {
	t.Helper()
	send(t, c, req)
	return protocol.ReadReply(c, kind, 1<<20)
}

func TestAuthRequiredBeforeLogin(t *testing.T) {
	s := startSecure(t, nil, authtest.User{Name: "alice", Password: "pw", Roles: []string{auth.RoleAdmin}})
	for _, useTLS := range []bool{false, true} {
		t.Run(fmt.Sprint("tls=", useTLS), func(t *testing.T) {
			c := s.connect(t, useTLS)
			send(t, c, aliveReq())
			expect(t, c, aliveReply())
			for _, req := range [][]byte{pubReq("orders", record("x")), createReq("new", 0),
				enc(protocol.AppendList(nil, nil)), enc(protocol.AppendReplica(nil, 0)),
				enc(protocol.AppendSub(nil, []byte("orders"), nil, 0, 1, 0, []byte("w")))} {
				send(t, c, req)
				expect(t, c, errReply("authentication required"))
			}
			// Still in step: log in on the same connection and publish.
			if err := login(t, c, "alice", "pw"); err != nil {
				t.Fatal(err)
			}
			send(t, c, pubReq("orders", record("x")))
			expect(t, c, okReply())
			send(t, c, enc(protocol.AppendAuthStart(nil, protocol.MechSCRAMSHA256, []byte("n,,n=alice,r=abc"))))
			expect(t, c, errReply("already authenticated"))
		})
	}
	// A request too long for an unauthenticated client is not read: 400,
	// then the connection is closed.
	c := s.dial(t)
	send(t, c, pubReq("orders", record(strings.Repeat("x", 1000))))
	expect(t, c, errReply("authentication required"))
	expectClosed(t, c)
	if got := s.backend.next(); got != 5 { // 2 creates, 2 pubs by alice
		t.Fatalf("nextID %d: a refused request changed the backend", got)
	}
}

func TestAuthFailuresRefused(t *testing.T) {
	const pw = "Tr0ub4dor&3"
	s := startSecure(t, nil,
		authtest.User{Name: "alice", Password: pw, Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "dis", Password: pw, Roles: []string{auth.RoleAdmin}, Disabled: true})
	cases := []struct{ name, user, pw, want string }{
		{"wrong password", "alice", "tr0ub4dor&3", "authentication failed"},
		{"unknown user", "mallory", pw, "authentication failed"},
		{"disabled user", "dis", pw, `authentication failed: user "dis" is disabled`},
	}
	for _, useTLS := range []bool{false, true} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/tls=%v", tc.name, useTLS), func(t *testing.T) {
				c := s.connect(t, useTLS)
				err := login(t, c, tc.user, tc.pw)
				var be *protocol.BizError
				if !errors.As(err, &be) || be.Msg != tc.want {
					t.Fatalf("login error %v, want %q", err, tc.want)
				}
				// Still refused afterwards, and the connection is in step.
				send(t, c, pubReq("orders", record("x")))
				expect(t, c, errReply("authentication required"))
			})
		}
	}
	if got := s.backend.next(); got != 3 {
		t.Fatalf("nextID %d: a failed login changed the backend", got)
	}
	logs := s.logs.String()
	for _, want := range []string{`reason="invalid proof or nonce"`, `reason="unknown user"`, `reason="user disabled"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("server log lacks %s", want)
		}
	}
	if strings.Contains(logs, pw) || strings.Contains(logs, "tr0ub4dor") {
		t.Fatalf("server log contains a password:\n%s", logs)
	}
}

func TestAuthContinueWithoutStart(t *testing.T) {
	s := startSecure(t, nil, authtest.User{Name: "alice", Password: "pw"})
	c := s.dial(t)
	send(t, c, enc(protocol.AppendAuthContinue(nil, []byte("c=biws,r=x,p=AAAA"))))
	expect(t, c, errReply(protocol.ErrAuthNoStart.Msg))
	send(t, c, enc(protocol.AppendAuthStart(nil, "PLAIN", []byte("\x00alice\x00pw"))))
	expect(t, c, errReply(protocol.ErrAuthMechanism.Msg))
	// Longer than MaxAuthMessage: refused unread, connection closed.
	req := enc(protocol.AppendAuthStart(nil, protocol.MechSCRAMSHA256, nil))
	copy(req[3:7], []byte{0xff, 0xff, 0, 0})
	send(t, c, req)
	expect(t, c, errReply(protocol.ErrAuthTooLong.Msg))
	expectClosed(t, c)
}

func TestAuthOffAnswersHandshake(t *testing.T) {
	ts := startServer(t, newFakeBackend(), nil)
	c := ts.dial(t)
	send(t, c, enc(protocol.AppendAuthStart(nil, protocol.MechSCRAMSHA256, []byte("n,,n=alice,r=abc"))))
	expect(t, c, errReply("authentication is not enabled on this server"))
	send(t, c, createReq("orders", 0))
	expect(t, c, okReply())
	cl, _ := auth.NewClient("alice", "pw")
	if err := cl.Login(c); !errors.Is(err, protocol.ErrAuthDisabled) {
		t.Fatalf("login against a server without auth: %v", err)
	}
}

func TestReplayedHandshakeRefused(t *testing.T) {
	s := startSecure(t, nil, authtest.User{Name: "alice", Password: "pw", Roles: []string{auth.RoleAdmin}})
	c := s.dial(t)
	rec := &recordConn{Conn: c}
	if err := login(t, rec, "alice", "pw"); err != nil {
		t.Fatal(err)
	}
	sent := rec.sent()
	// Replay both recorded requests on a new connection: the server's nonce
	// differs, so the recorded proof cannot verify.
	c2 := s.dial(t)
	send(t, c2, sent)
	if _, err := protocol.ReadReply(c2, protocol.ReplyJSON, protocol.MaxAuthMessage); err != nil {
		t.Fatalf("replayed first message: %v", err)
	}
	if _, err := protocol.ReadReply(c2, protocol.ReplyJSON, protocol.MaxAuthMessage); !errors.Is(err, protocol.ErrAuthFailed) {
		t.Fatalf("replayed final message: %v, want authentication failed", err)
	}
	send(t, c2, pubReq("orders", record("x")))
	expect(t, c2, errReply("authentication required"))
}

func TestRateLimitedPerAddress(t *testing.T) {
	lim := auth.NewLimiter(auth.LimiterOptions{Free: 3, BaseDelay: time.Minute})
	s := startSecure(t, lim, authtest.User{Name: "alice", Password: "pw"})
	c := s.dial(t)
	var lockedAt time.Time
	for i := range 3 {
		lockedAt = time.Now() // the lockout starts with the third failure, after this
		if err := login(t, c, "alice", "bad"); !errors.Is(err, protocol.ErrAuthFailed) {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	// Locked out now: even the right password is refused unheard, on any
	// connection from this address. The wait is rounded up to whole
	// seconds: 60s, unless this machine took a second or more to get here.
	retryIn := regexp.MustCompile(`^too many failed authentication attempts; retry in (\d+)s$`)
	for _, conn := range []net.Conn{c, s.dial(t)} {
		err := login(t, conn, "alice", "pw")
		var be *protocol.BizError
		if !errors.As(err, &be) || !retryIn.MatchString(be.Msg) {
			t.Fatalf("login during lockout: %v", err)
		}
		secs, _ := strconv.Atoi(retryIn.FindStringSubmatch(be.Msg)[1])
		if low := 60 - int(math.Ceil(time.Since(lockedAt).Seconds())); secs < low || secs > 60 {
			t.Fatalf("login during lockout: %q, want a wait of %d to 60s", be.Msg, low)
		}
	}
	// Another address is not affected (Linux routes all of 127/8 to lo).
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: testDeadline}
	other, err := d.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.2: %v", err)
	}
	defer other.Close()
	other.SetDeadline(time.Now().Add(testDeadline))
	if err := login(t, other, "alice", "pw"); err != nil {
		t.Fatalf("login from another address: %v", err)
	}
}

// recordConn keeps the bytes written through it.
type recordConn struct {
	net.Conn
	w []byte
}

func (r *recordConn) Write(p []byte) (int, error) {
	r.w = append(r.w, p...)
	return r.Conn.Write(p)
}

func (r *recordConn) sent() []byte { return append([]byte(nil), r.w...) }

// next is the eventId the backend would assign next: any write moves it.
func (b *fakeBackend) next() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nextID
}

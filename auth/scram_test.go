package auth_test

import (
	"bufio"
	"bytes"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/protocol"
)

// miniServer answers auth requests on nc with a, like the real server's
// handshake (without the rest of the protocol).
func miniServer(a *auth.Authenticator, nc net.Conn) (result chan error) {
	result = make(chan error, 1)
	go func() {
		defer nc.Close()
		br := bufio.NewReader(nc)
		var conv *auth.Conversation
		for {
			req, err := protocol.ReadRequest(br, protocol.Limits{})
			if err != nil {
				result <- err
				return
			}
			var out []byte
			switch req.Header.Cmd {
			case protocol.CmdAuthStart:
				var msg []byte
				conv, msg, err = a.Start(string(req.Topic), req.Payload)
				if err == nil {
					out, _ = protocol.AppendReplyJSON(nil, msg)
				}
			case protocol.CmdAuthContinue:
				var msg []byte
				_, msg, err = conv.Finish(req.Payload)
				if err == nil {
					out, _ = protocol.AppendReplyJSON(nil, msg)
				}
			}
			if err != nil {
				var f *auth.Failure
				if !errors.As(err, &f) {
					result <- err
					return
				}
				out = protocol.AppendReplyError(nil, f.Client.Msg)
			}
			if _, err := nc.Write(out); err != nil {
				result <- err
				return
			}
			if req.Header.Cmd == protocol.CmdAuthContinue {
				result <- err
				return
			}
		}
	}()
	return result
}

// recorder keeps every byte written through it.
type recorder struct {
	net.Conn
	mu sync.Mutex
	w  bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.w.Write(p)
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func newAuthenticator(t *testing.T, f *auth.File) *auth.Authenticator {
	t.Helper()
	s, err := auth.NewStore(f)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func login(t *testing.T, a *auth.Authenticator, user, password string) (clientErr, serverErr error, wire []byte) {
	t.Helper()
	c, s := net.Pipe()
	res := miniServer(a, s)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	cl, err := auth.NewClient(user, password)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Conn: c}
	clientErr = cl.Login(rec)
	c.Close()
	serverErr = <-res
	return clientErr, serverErr, rec.w.Bytes()
}

func TestLogin(t *testing.T) {
	const pw = "correct horse battery staple"
	a := newAuthenticator(t, authtest.Users(t,
		authtest.User{Name: "alice", Password: pw},
		authtest.User{Name: "dis", Password: pw, Disabled: true}))
	cases := []struct {
		name, user, pw string
		want           string // "" = success
		reason         string
	}{
		{"ok", "alice", pw, "", ""},
		{"wrong password", "alice", pw + "!", "authentication failed", "invalid proof"},
		{"unknown user", "mallory", pw, "authentication failed", "unknown user"},
		{"disabled", "dis", pw, `authentication failed: user "dis" is disabled`, "user disabled"},
		{"disabled wrong password", "dis", "nope", "authentication failed", "invalid proof"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cerr, serr, wire := login(t, a, tc.user, tc.pw)
			if tc.want == "" {
				if cerr != nil || serr != nil {
					t.Fatalf("login failed: client %v, server %v", cerr, serr)
				}
			} else {
				var be *protocol.BizError
				if !errors.As(cerr, &be) || be.Msg != tc.want {
					t.Fatalf("client error %v, want %q", cerr, tc.want)
				}
				var f *auth.Failure
				if !errors.As(serr, &f) || !strings.Contains(f.Reason, tc.reason) {
					t.Fatalf("server error %v, want reason %q", serr, tc.reason)
				}
			}
			assertNoSecret(t, wire, tc.pw)
		})
	}
}

// assertNoSecret checks that neither the password nor its salted form (for
// any salt the wire shows) appears in b, raw, hex or base64.
func assertNoSecret(t *testing.T, b []byte, password string) {
	t.Helper()
	forms := [][]byte{[]byte(password)}
	if m := saltRe(b); m != nil {
		sp, err := pbkdf2.Key(sha256.New, password, m.salt, m.iters, 32)
		if err != nil {
			t.Fatal(err)
		}
		forms = append(forms, sp)
	}
	for _, f := range forms {
		for _, enc := range [][]byte{f, []byte(hex.EncodeToString(f)), []byte(base64.StdEncoding.EncodeToString(f)),
			[]byte(base64.RawStdEncoding.EncodeToString(f))} {
			if bytes.Contains(b, enc) {
				t.Fatalf("secret material %q found in %q", enc, b)
			}
		}
	}
}

type saltIters struct {
	salt  []byte
	iters int
}

// saltRe finds "s=<salt>,i=<n>" of a server-first-message in b.
func saltRe(b []byte) *saltIters {
	i := bytes.Index(b, []byte(",s="))
	if i < 0 {
		return nil
	}
	rest := b[i+3:]
	j := bytes.Index(rest, []byte(",i="))
	if j < 0 {
		return nil
	}
	salt, err := base64.StdEncoding.DecodeString(string(rest[:j]))
	if err != nil {
		return nil
	}
	n := 0
	for _, c := range rest[j+3:] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return &saltIters{salt: salt, iters: n}
}

func TestLoginSecretsOffTheWireBothWays(t *testing.T) {
	const pw = "s3cret-Pa55"
	a := newAuthenticator(t, authtest.Users(t, authtest.User{Name: "alice", Password: pw}))
	c, s := net.Pipe()
	srec := &recorder{Conn: s}
	res := miniServer(a, srec)
	cl, _ := auth.NewClient("alice", pw)
	crec := &recorder{Conn: c}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := cl.Login(crec); err != nil {
		t.Fatal(err)
	}
	c.Close()
	<-res
	both := append(crec.w.Bytes(), srec.w.Bytes()...)
	if !bytes.Contains(both, []byte("n=alice")) || !bytes.Contains(both, []byte("v=")) {
		t.Fatalf("capture does not look like a handshake: %q", both)
	}
	assertNoSecret(t, both, pw)
}

func TestReplayedHandshakeFails(t *testing.T) {
	const pw = "pw"
	a := newAuthenticator(t, authtest.Users(t, authtest.User{Name: "alice", Password: pw}))
	cerr, serr, wire := login(t, a, "alice", pw)
	if cerr != nil || serr != nil {
		t.Fatalf("recorded login failed: %v %v", cerr, serr)
	}
	// Replay the recorded client bytes on a fresh connection, reading the
	// replies as an attacker would.
	c, s := net.Pipe()
	res := miniServer(a, s)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	rr := protocol.NewRequestReader(bytes.NewReader(wire), protocol.Limits{})
	var req protocol.Request
	var replies []error
	for {
		if err := rr.Read(&req); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		raw, _ := protocol.AppendRequest(nil, req.Header.Cmd, req.Header.Area, req.Topic, req.TraceID, req.Payload)
		if _, err := c.Write(raw); err != nil {
			t.Fatal(err)
		}
		_, err := protocol.ReadReply(br, protocol.ReplyJSON, protocol.MaxAuthMessage)
		replies = append(replies, err)
	}
	if len(replies) != 2 || replies[0] != nil || !errors.Is(replies[1], protocol.ErrAuthFailed) {
		t.Fatalf("replay replies %v, want [nil, authentication failed]", replies)
	}
	var f *auth.Failure
	if err := <-res; !errors.As(err, &f) {
		t.Fatalf("server result %v, want a failure", err)
	}
}

func TestUnknownUserLooksLikeKnown(t *testing.T) {
	a := newAuthenticator(t, authtest.Users(t, authtest.User{Name: "alice", Password: "pw"}))
	first := func(user string) *saltIters {
		conv, msg, err := a.Start(protocol.MechSCRAMSHA256, []byte("n,,n="+user+",r=abcdefgh"))
		if err != nil || conv == nil {
			t.Fatalf("start %s: %v", user, err)
		}
		return saltRe(append([]byte(","), msg...))
	}
	k, u1, u2 := first("alice"), first("mallory"), first("mallory")
	if k == nil || u1 == nil || u1.iters != k.iters || len(u1.salt) != len(k.salt) || !bytes.Equal(u1.salt, u2.salt) {
		t.Fatalf("unknown user distinguishable: known %+v, unknown %+v then %+v", k, u1, u2)
	}
}

func TestServerImpostorDetected(t *testing.T) {
	f := authtest.Users(t, authtest.User{Name: "alice", Password: "pw"})
	// A server that can verify the proof (it stole StoredKey) but does not
	// hold ServerKey cannot prove itself.
	f.Users[0].SCRAM.ServerKey = bytes.Repeat([]byte{7}, 32)
	a := newAuthenticator(t, f)
	cerr, _, _ := login(t, a, "alice", "pw")
	if !errors.Is(cerr, auth.ErrServerProof) {
		t.Fatalf("client error %v, want ErrServerProof", cerr)
	}
}

func TestStartRefusesGarbage(t *testing.T) {
	a := newAuthenticator(t, authtest.Users(t, authtest.User{Name: "alice", Password: "pw"}))
	for _, tc := range []struct{ mech, msg string }{
		{"PLAIN", "n,,n=alice,r=x"},
		{protocol.MechSCRAMSHA256, ""},
		{protocol.MechSCRAMSHA256, "garbage"},
		{protocol.MechSCRAMSHA256, "n,a=bob,n=alice,r=x"},
	} {
		var f *auth.Failure
		if _, _, err := a.Start(tc.mech, []byte(tc.msg)); !errors.As(err, &f) {
			t.Errorf("%s %q: error %v, want a Failure", tc.mech, tc.msg, err)
		}
	}
}

func FuzzHandshakeMessages(f *testing.F) {
	f.Add("n,,n=alice,r=abc", "c=biws,r=abc,p=AAAA")
	f.Add("y,,n=mallory,r=x", "c=eSws,r=x")
	f.Add("p=tls-unique,,n=a,r=b", "")
	a := newAuthenticatorF(f)
	f.Fuzz(func(t *testing.T, first, final string) {
		conv, _, err := a.Start(protocol.MechSCRAMSHA256, []byte(first))
		if err != nil {
			return
		}
		if p, _, err := conv.Finish([]byte(final)); err == nil || p != nil {
			t.Fatalf("fuzzed proof accepted for %q", conv.User())
		}
	})
}

func newAuthenticatorF(f *testing.F) *auth.Authenticator {
	s, err := auth.NewStore(authtest.Users(f, authtest.User{Name: "alice", Password: "pw"}))
	if err != nil {
		f.Fatal(err)
	}
	a, err := auth.NewAuthenticator(s, nil)
	if err != nil {
		f.Fatal(err)
	}
	return a
}

package server

import (
	"bytes"
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/protocol"
)

// permUsers hold one grant each (on "orders"), plus an admin and a user
// with nothing.
var permUsers = []authtest.User{
	{Name: "admin", Password: "pw", Roles: []string{auth.RoleAdmin}},
	{Name: "pubber", Password: "pw", Publish: []string{"orders"}},
	{Name: "subber", Password: "pw", Subscribe: []string{"orders"}},
	{Name: "manager", Password: "pw", Manage: []string{"orders"}},
	{Name: "slave", Password: "pw", Roles: []string{auth.RoleReplication}},
	{Name: "nobody", Password: "pw"},
}

type permCmd struct {
	name   string
	perm   auth.Permission
	topic  bool // per-topic permission
	req    func(topic, who string) []byte
	stream bool // sub: the reply is a stream unit
}

var permCmds = []permCmd{
	{"pub", auth.PermPublish, true, func(tp, _ string) []byte { return pubReq(tp, record("x")) }, false},
	{"delay", auth.PermPublish, true, func(tp, _ string) []byte {
		return enc(protocol.AppendDelay(nil, []byte(tp), nil, 5000, record("x")))
	}, false},
	{"sub", auth.PermSubscribe, true, func(tp, who string) []byte {
		return enc(protocol.AppendSub(nil, []byte(tp), nil, 0, 1, 0, []byte(who)))
	}, true},
	{"create", auth.PermManage, true, func(tp, _ string) []byte { return createReq(tp, 0) }, false},
	{"delete", auth.PermManage, true, func(tp, _ string) []byte { return enc(protocol.AppendDelete(nil, []byte(tp), nil)) }, false},
	{"info", auth.PermDescribe, true, func(tp, _ string) []byte { return enc(protocol.AppendTopicInfo(nil, []byte(tp), nil)) }, false},
	{"replica", auth.PermReplication, false, func(string, string) []byte { return enc(protocol.AppendReplica(nil, 0)) }, false},
	{"validList", auth.PermReplication, false, func(string, string) []byte { return enc(protocol.AppendValidList(nil, nil, 0)) }, false},
	// Without a Failover the server answers promote and follow with a 400
	// that is not a permission refusal.
	{"promote", auth.PermAdmin, false, func(string, string) []byte { return enc(protocol.AppendPromote(nil, nil)) }, false},
	{"follow", auth.PermAdmin, false, func(string, string) []byte { return enc(protocol.AppendFollow(nil, "127.0.0.1:1", nil)) }, false},
	{"switchover", auth.PermAdmin, false, func(string, string) []byte { return enc(protocol.AppendSwitchover(nil, "b", nil)) }, false},
	// Likewise the cursor commands without Cursors (400 "stored positions are
	// not available on this server").
	{"cursorList", auth.PermAdmin, false, func(tp, _ string) []byte { return enc(protocol.AppendCursorList(nil, []byte(tp), nil)) }, false},
	{"cursorSet", auth.PermAdmin, false, func(tp, who string) []byte {
		return enc(protocol.AppendCursorSet(nil, []byte(tp), []byte(who), 1, nil))
	}, false},
	{"cursorReset", auth.PermAdmin, false, func(tp, who string) []byte {
		return enc(protocol.AppendCursorReset(nil, []byte(tp), []byte(who), nil))
	}, false},
}

// allowed is the expected outcome: each grant allows exactly what it names.
func allowed(user string, cmd permCmd, topic string) bool {
	switch user {
	case "admin":
		return true
	case "slave":
		return cmd.perm == auth.PermReplication
	case "nobody":
		return false
	}
	if topic != "orders" {
		return false
	}
	switch user {
	case "pubber":
		return cmd.perm == auth.PermPublish || cmd.perm == auth.PermDescribe
	case "subber":
		return cmd.perm == auth.PermSubscribe || cmd.perm == auth.PermDescribe
	case "manager":
		return cmd.perm == auth.PermManage || cmd.perm == auth.PermDescribe
	}
	return false
}

func TestPermissionTable(t *testing.T) {
	s := startSecure(t, nil, permUsers...)
	n := 0
	for _, useTLS := range []bool{false, true} {
		for _, u := range permUsers {
			for _, cmd := range permCmds {
				for _, topic := range []string{"orders", "other"} {
					n++
					name := fmt.Sprintf("%s/%s/%s/tls=%v", u.Name, cmd.name, topic, useTLS)
					t.Run(name, func(t *testing.T) {
						s.ensureTopics(t)
						c := s.connect(t, useTLS)
						if err := login(t, c, u.Name, u.Password); err != nil {
							t.Fatal(err)
						}
						before, subsBefore := s.backend.next(), s.backend.subsMade.Load()
						send(t, c, cmd.req(topic, fmt.Sprint("w", n)))
						var err error
						if cmd.stream {
							_, err = protocol.ReadSubFrame(c, 1<<20)
						} else {
							_, err = protocol.ReadReply(c, protocol.ReplyJSON, 1<<20)
						}
						var be *protocol.BizError
						denied := errors.As(err, &be) && strings.HasPrefix(be.Msg, "permission denied")
						if want := allowed(u.Name, cmd, topic); want == denied {
							t.Fatalf("allowed=%v, got reply error %v", want, err)
						}
						if !denied {
							return
						}
						tp := ""
						if cmd.topic {
							tp = topic
						}
						want := auth.Denied(u.Name, cmd.perm, tp).Msg
						if strings.HasPrefix(cmd.name, "cursor") {
							want = fmt.Sprintf("permission denied: user %q may not list or change stored positions (needs the admin role)", u.Name)
						}
						if be.Msg != want {
							t.Fatalf("denied with %q, want %q", be.Msg, want)
						}
						if s.backend.next() != before || s.backend.subsMade.Load() != subsBefore {
							t.Fatal("a denied command changed the backend")
						}
						// The request was consumed: the connection is in step.
						send(t, c, aliveReq())
						expect(t, c, aliveReply())
					})
				}
			}
		}
	}
}

// ensureTopics recreates the test topics a previous case deleted.
func (s *secServer) ensureTopics(t *testing.T) {
	t.Helper()
	for _, name := range []string{"orders", "other"} {
		if _, err := s.backend.Topic([]byte(name)); err == nil {
			continue
		}
		if _, err := s.backend.CreateTopic(context.Background(), []byte(name), 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestListShowsGrantedTopics(t *testing.T) {
	s := startSecure(t, nil, permUsers...)
	for user, want := range map[string][]string{"admin": {"orders", "other"}, "pubber": {"orders"},
		"manager": {"orders"}, "nobody": nil, "slave": nil} {
		c := s.dial(t)
		if err := login(t, c, user, "pw"); err != nil {
			t.Fatal(err)
		}
		body, err := call(t, c, enc(protocol.AppendList(nil, nil)), protocol.ReplyJSON)
		if err != nil {
			t.Fatal(err)
		}
		var got []struct{ Name string }
		if len(body) > 0 {
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
		}
		var names []string
		for _, g := range got {
			names = append(names, g.Name)
		}
		if fmt.Sprint(names) != fmt.Sprint(want) {
			t.Errorf("%s lists %v, want %v", user, names, want)
		}
	}
}

func TestReloadAppliesWithoutDroppingConnections(t *testing.T) {
	s := startSecure(t, nil,
		authtest.User{Name: "bob", Password: "pw", Publish: []string{"orders"}, Subscribe: []string{"orders"}},
		authtest.User{Name: "carol", Password: "pw", Publish: []string{"other"}})
	bob, carol := s.dial(t), s.dial(t)
	for c, u := range map[net.Conn]string{bob: "bob", carol: "carol"} {
		if err := login(t, c, u, "pw"); err != nil {
			t.Fatal(err)
		}
	}
	send(t, bob, pubReq("orders", record("x")))
	expect(t, bob, okReply())
	// A subscription stream of bob's, which the reload must cut.
	stream := s.dial(t)
	if err := login(t, stream, "bob", "pw"); err != nil {
		t.Fatal(err)
	}
	send(t, stream, enc(protocol.AppendSub(nil, []byte("orders"), nil, 0, 1, 0, []byte("w"))))
	if f, err := protocol.ReadSubFrame(stream, 1<<20); err != nil || f.Code != protocol.StatusOK {
		t.Fatalf("first frame %+v, %v", f, err)
	}
	send(t, stream, []byte{0, 0}) // ack

	authtest.WriteUsers(t, s.users,
		authtest.User{Name: "bob", Password: "pw", Publish: []string{"other"}},
		authtest.User{Name: "carol", Password: "pw", Publish: []string{"other"}, Disabled: true})
	if err := s.ReloadUsers(); err != nil {
		t.Fatal(err)
	}
	// bob's connection survived and follows the new grants.
	send(t, bob, pubReq("orders", record("x")))
	expect(t, bob, errReply(`permission denied: user "bob" may not publish to "orders"`))
	send(t, bob, pubReq("other", record("x")))
	expect(t, bob, okReply())
	// carol is disabled: refused and disconnected on her next command.
	send(t, carol, pubReq("other", record("x")))
	expect(t, carol, errReply(`user "carol" is disabled`))
	expectClosed(t, carol)
	// bob lost subscribe on orders: the stream is closed (alives may come
	// first), and his slot is free again.
	for {
		f, err := protocol.ReadSubFrame(stream, 1<<20)
		if err != nil {
			break
		}
		if f.Code != protocol.StatusAlive {
			t.Fatalf("frame %+v after the reload", f)
		}
	}
	if !strings.Contains(s.logs.String(), "closing a stream whose user lost its permission") {
		t.Fatal("no log of the cut stream")
	}

	// A broken file is refused and the users in force stay.
	if err := writeFile(s.users, `{"version":1,"users":[`); err != nil {
		t.Fatal(err)
	}
	if err := s.ReloadUsers(); err == nil {
		t.Fatal("a broken users file was accepted")
	}
	send(t, bob, pubReq("other", record("x")))
	expect(t, bob, okReply())
}

// wireRecorder keeps both directions of a connection.
type wireRecorder struct {
	net.Conn
	mu  sync.Mutex
	all bytes.Buffer
}

func (w *wireRecorder) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	w.mu.Lock()
	w.all.Write(p[:n])
	w.mu.Unlock()
	return n, err
}

func (w *wireRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.all.Write(p)
	w.mu.Unlock()
	return w.Conn.Write(p)
}

func TestSecretsNeverOnTheWireOrInLogs(t *testing.T) {
	const pw = "Never-Send-Me-42"
	s := startSecure(t, nil, authtest.User{Name: "alice", Password: pw, Roles: []string{auth.RoleAdmin}})
	rec := &wireRecorder{Conn: s.dial(t)}
	if err := login(t, rec, "alice", pw); err != nil {
		t.Fatal(err)
	}
	// A failed attempt too, whose proof uses a wrong password.
	rec2 := &wireRecorder{Conn: s.dial(t)}
	if err := login(t, rec2, "alice", pw+"x"); err == nil {
		t.Fatal("wrong password accepted")
	}
	wire := append(rec.all.Bytes(), rec2.all.Bytes()...)
	if !bytes.Contains(wire, []byte("n=alice")) || !bytes.Contains(wire, []byte(",s=")) {
		t.Fatalf("capture is not a handshake: %q", wire)
	}
	f, err := auth.ReadFile(s.users)
	if err != nil {
		t.Fatal(err)
	}
	c := f.Lookup("alice").SCRAM
	var secrets [][]byte
	for _, p := range []string{pw, pw + "x"} {
		sp, err := pbkdf2.Key(sha256.New, p, c.Salt, c.Iterations, 32)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, []byte(p), sp, []byte(base64.StdEncoding.EncodeToString(sp)))
	}
	secrets = append(secrets, []byte(base64.StdEncoding.EncodeToString(c.StoredKey)), []byte(base64.StdEncoding.EncodeToString(c.ServerKey)))
	logs := []byte(s.logs.String())
	for _, sec := range secrets {
		if bytes.Contains(wire, sec) {
			t.Fatalf("secret %q on the wire", sec)
		}
		if bytes.Contains(logs, sec) {
			t.Fatalf("secret %q in the server log", sec)
		}
	}
	if !bytes.Contains(logs, []byte("authenticated")) {
		t.Fatal("the server log does not show the login (is it captured?)")
	}
}

func writeFile(path, data string) error { return os.WriteFile(path, []byte(data), 0o600) }

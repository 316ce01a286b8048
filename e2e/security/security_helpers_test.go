package security

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/smssmq/smss/auth/authtest"
	"github.com/smssmq/smss/e2e/internal/kit"
)

var tlsListenRe = regexp.MustCompile(`listening \(TLS\).*addr=(\S+)`)

// secured is a real server with authentication on and a TLS listener.
type secured struct {
	*kit.Proc
	users   string
	pki     *authtest.PKI
	tlsAddr string
}

// startSecured runs the binary with auth (users written to its users file)
// and a TLS listener; extra is appended to the config. maxFailures bounds
// failed logins per address before lockouts.
func startSecured(t *testing.T, maxFailures int, extra string, users ...authtest.User) *secured {
	t.Helper()
	dir := t.TempDir()
	pki := authtest.NewPKI(t)
	path := filepath.Join(dir, "users.json")
	authtest.WriteUsers(t, path, users...)
	kit.WriteConfig(t, dir, fmt.Sprintf("auth:\n  enabled: true\n  usersFile: %s\n  maxFailures: %d\n  lockoutMs: 60000\n"+
		"tls:\n  listen: 127.0.0.1:0\n  cert: %s\n  key: %s\n%s", path, maxFailures, pki.ServerCert, pki.ServerKey, extra))
	p := kit.Start(t, dir)
	m := tlsListenRe.FindStringSubmatch(p.Out.String())
	if m == nil {
		t.Fatalf("no TLS listener in the log:\n%s", p.Out.String())
	}
	return &secured{Proc: p, users: path, pki: pki, tlsAddr: m[1]}
}

// recorder keeps both directions of a connection's bytes.
type recorder struct {
	net.Conn
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	r.buf.Write(p[:n])
	r.mu.Unlock()
	return n, err
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.buf.Write(p)
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}

// connect opens a raw protocol connection to the plain or TLS listener;
// rec, when set, records the bytes below TLS.
func (s *secured) connect(t *testing.T, useTLS bool, rec **recorder) *kit.Client {
	t.Helper()
	addr := s.Addr
	if useTLS {
		addr = s.tlsAddr
	}
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	if rec != nil {
		*rec = &recorder{Conn: nc}
		nc = *rec
	}
	if useTLS {
		tc := tls.Client(nc, s.pki.ClientConfig(t, false))
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		nc = tc
	}
	return &kit.Client{C: nc, R: bufio.NewReader(nc)}
}

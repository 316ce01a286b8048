package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/internal/smsstest"
)

// Attacks of issue 18 on the admin port, over real TCP.

// rawConn dials the admin listener.
func (e *testEnv) rawConn(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.srv.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A request whose header or body trickles in cannot hold a connection past
// the request timeout: the server answers or closes, and the connection is
// gone soon after.
func TestTrickledRequestCannotHoldConnection(t *testing.T) {
	const timeout = 500 * time.Millisecond
	const patience = 8 * time.Second // far beyond the timeout, far below "indefinitely"
	e := newEnv(t, testToken, true, func(o *Options) { o.RequestTimeout = timeout })
	cases := []struct{ name, head string }{
		{"login body", "POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n"},
		{"body nobody reads", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n"},
		{"authorized body", "POST /api/topics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + testToken + "\r\nContent-Length: 100000\r\n\r\n"},
		{"header", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"},
		// Streams and profiles lift the read deadline, never for a body.
		{"event stream body", "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n"},
		{"profile body", "GET /debug/pprof/profile?seconds=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + testToken + "\r\nContent-Length: 100000\r\n\r\n"},
		{"chunked event stream body", "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := e.rawConn(t)
			if _, err := io.WriteString(c, tc.head); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			stop := make(chan struct{})
			defer close(stop)
			go func() { // one byte every 50 ms, as long as the server takes them
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := c.Write([]byte("X")); err != nil {
							return
						}
					}
				}
			}()
			c.SetReadDeadline(start.Add(patience))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after %v of trickling", patience)
			}
			if el := time.Since(start); el > patience {
				t.Fatalf("closed only after %v", el)
			}
		})
	}
}

// Connections beyond admin.maxConns are closed at accept; the cap holds
// however many connect, and a slot freed is a slot again.
func TestAdminConnectionCap(t *testing.T) {
	const limit = 4
	e := newEnv(t, "", true, func(o *Options) { o.MaxConns = limit })
	held := make([]net.Conn, 0, limit)
	for range limit {
		held = append(held, e.rawConn(t))
	}
	// The held ones are accepted (the listener counts them) before the
	// flood, so the flood is what is over the cap.
	ln := e.srv.ln.(*capListener)
	smsstest.WaitFor(t, 10*time.Second, "the listener to hold the limit of open connections", func() bool { return ln.Open() == limit })
	for i := range 50 {
		c := e.rawConn(t)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("connection %d over the cap: read %d, %v; want closed at once", i, n, err)
		}
		if n := ln.Open(); n > limit {
			t.Fatalf("%d connections open, cap %d", n, limit)
		}
	}
	held[0].Close()
	smsstest.WaitFor(t, 10*time.Second, "the listener to drop below its limit", func() bool { return ln.Open() < limit })
	resp, err := http.Get(e.base + "/healthz")
	if err != nil {
		t.Fatalf("after a slot was freed: %v", err)
	}
	resp.Body.Close()
}

// Without a token only loopback Host names are answered (DNS rebinding);
// with a token any Host is, with the token.
func TestNoTokenLoopbackHostOnly(t *testing.T) {
	open := newEnv(t, "", false, nil)
	for _, tc := range []struct {
		host, path string
		want       int
	}{
		{"127.0.0.1:12380", "/api/topics", 200},
		{"localhost:12380", "/api/topics", 200},
		{"LOCALHOST", "/metrics", 200},
		{"[::1]:12380", "/api/info", 200},
		{"127.0.0.2", "/api/info", 200},
		{"evil.example:12380", "/api/topics", http.StatusMisdirectedRequest},
		{"evil.example", "/", http.StatusMisdirectedRequest},
		{"10.0.0.1:12380", "/metrics", http.StatusMisdirectedRequest},
		{"localhost.evil.example", "/api/topics", http.StatusMisdirectedRequest},
		{"evil.example", "/healthz", 200},
		{"10.0.0.7:12380", "/readyz", 200}, // a probe addresses the pod's IP
	} {
		if w := open.do(http.MethodGet, tc.path, "", nil, "Host", tc.host); w.Code != tc.want {
			t.Errorf("no token, Host %s, GET %s: %d, want %d", tc.host, tc.path, w.Code, tc.want)
		}
	}
	tok := newEnv(t, testToken, false, nil)
	if w := tok.do(http.MethodGet, "/api/topics", "Bearer "+testToken, nil, "Host", "smss.example:12380"); w.Code != 200 {
		t.Errorf("with a token, another Host: %d", w.Code)
	}
}

// Wrong tokens are throttled per address: once locked out, even the right
// token is refused unheard, on the API and at the sign-in.
func TestWrongTokensThrottled(t *testing.T) {
	e := newEnv(t, testToken, false, func(o *Options) {
		o.Throttle = auth.NewLimiter(auth.LimiterOptions{Free: 3, BaseDelay: time.Minute})
	})
	for i := range 3 {
		if w := e.do(http.MethodGet, "/api/topics", "Bearer wrong-token-number-"+fmt.Sprint(i), nil); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d", i, w.Code)
		}
	}
	if w := e.do(http.MethodGet, "/api/topics", "Bearer "+testToken, nil); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("right token during the lockout: %d %v", w.Code, w.Header())
	}
	if w := e.do(http.MethodPost, "/api/login", "", strings.NewReader(`{"token":"`+testToken+`"}`), "Content-Type", "application/json"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("sign-in during the lockout: %d", w.Code)
	}
	// Wrong sign-ins count too.
	f := newEnv(t, testToken, false, func(o *Options) {
		o.Throttle = auth.NewLimiter(auth.LimiterOptions{Free: 2, BaseDelay: time.Minute})
	})
	for range 2 {
		f.do(http.MethodPost, "/api/login", "", strings.NewReader(`{"token":"nope"}`), "Content-Type", "application/json")
	}
	if w := f.do(http.MethodGet, "/api/topics", "Bearer "+testToken, nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("after wrong sign-ins: %d", w.Code)
	}
}

// A sign-in's cookie expires (Max-Age, and server side), and sign-out ends
// the session even for a copy of the cookie.
func TestSessionExpiresAndLogoutEndsIt(t *testing.T) {
	const ttl = time.Hour
	e := newEnv(t, testToken, true, func(o *Options) { o.SessionTTL = ttl })
	now := time.Now()
	e.srv.sessions.now = func() time.Time { return now }

	signIn := func() *http.Cookie {
		t.Helper()
		resp, err := http.Post(e.base+"/api/login", "application/json", strings.NewReader(`{"token":"`+testToken+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, c := range resp.Cookies() {
			if c.Name == SessionCookie {
				return c
			}
		}
		t.Fatalf("sign-in: %d, no cookie", resp.StatusCode)
		return nil
	}
	get := func(c *http.Cookie) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.base+"/api/info", nil)
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	c := signIn()
	if c.MaxAge != int(ttl/time.Second) || c.Expires.IsZero() {
		t.Fatalf("cookie without expiry: %+v", c)
	}
	if get(c) != 200 {
		t.Fatal("fresh session refused")
	}
	now = now.Add(ttl)
	if code := get(c); code != http.StatusUnauthorized {
		t.Fatalf("session past its TTL: %d", code)
	}

	c = signIn()
	other := signIn()
	req, _ := http.NewRequest(http.MethodPost, e.base+"/api/logout", nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code := get(c); code != http.StatusUnauthorized {
		t.Fatalf("session after sign-out: %d", code)
	}
	if get(other) != 200 {
		t.Fatal("sign-out ended another session")
	}
}

// Bodies are bounded: a request body over MaxBodyBytes gets 413, whatever
// the handler.
func TestAdminBodyBounded(t *testing.T) {
	e := newEnv(t, testToken, true, func(o *Options) { o.MaxBodyBytes = 1024 })
	body := strings.NewReader(`{"token":"` + strings.Repeat("a", 2000) + `"}`)
	resp, err := http.Post(e.base+"/api/login", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("2 KiB body with a 1 KiB bound: %d", resp.StatusCode)
	}
}

// With client authentication on and no admin token, start-up warns.
func TestStartWarnsAuthWithoutToken(t *testing.T) {
	for _, tc := range []struct {
		token      string
		clientAuth bool
		warn       bool
	}{
		{"", true, true},
		{"", false, false},
		{testToken, true, false},
	} {
		logs := &strings.Builder{}
		srv, err := New(Options{Listen: "127.0.0.1:0", Token: tc.token, ClientAuth: tc.clientAuth,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.Shutdown(ctx)
		cancel()
		if got := strings.Contains(logs.String(), "auth.enabled is true but admin.token is empty"); got != tc.warn {
			t.Errorf("token %q, clientAuth %v: warned %v, want %v\n%s", tc.token, tc.clientAuth, got, tc.warn, logs.String())
		}
	}
}

// FuzzLoopbackHost: any Host header is judged without a panic, and only
// loopback names and addresses pass.
func FuzzLoopbackHost(f *testing.F) {
	for _, h := range []string{"localhost", "localhost:1", "127.0.0.1:12380", "[::1]:80", "::1", "evil.example",
		"localhost.evil", "[::ffff:127.0.0.1]:1", "127.0.0.1.nip.io", "", ":", "[", "0x7f.1"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if !loopbackHost(host) {
			return
		}
		h := host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			h = hh
		}
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if ip := net.ParseIP(h); !strings.EqualFold(h, "localhost") && (ip == nil || !ip.IsLoopback()) {
			t.Fatalf("Host %q accepted as loopback", host)
		}
	})
}

package admin

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/smssmq/smss/auth"
)

// SessionCookie is the name of the dashboard's session cookie.
const SessionCookie = "smss_admin"

// maxLoginBody bounds what /api/login reads.
const maxLoginBody = 4096

// maxSessions bounds the dashboard sessions held; a sign-in beyond it
// replaces the session closest to expiry.
const maxSessions = 1024

// sessions are the dashboard's sign-ins: random ids, each valid until its
// expiry or a sign-out. Kept server side, so a sign-out ends a session
// even if its cookie was copied, and a restart ends them all.
type sessions struct {
	ttl time.Duration
	now func() time.Time
	mu  sync.Mutex
	m   map[string]time.Time // id -> expiry
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, now: time.Now, m: make(map[string]time.Time)}
}

// create returns a new session id and its expiry.
func (ss *sessions) create() (string, time.Time, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", time.Time{}, err
	}
	id := hex.EncodeToString(b)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	if len(ss.m) >= maxSessions {
		var oldest string
		for k, exp := range ss.m {
			if !now.Before(exp) {
				delete(ss.m, k)
			} else if oldest == "" || exp.Before(ss.m[oldest]) {
				oldest = k
			}
		}
		if len(ss.m) >= maxSessions {
			delete(ss.m, oldest)
		}
	}
	exp := now.Add(ss.ttl)
	ss.m[id] = exp
	return id, exp, nil
}

func (ss *sessions) valid(id string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	exp, ok := ss.m[id]
	if ok && !ss.now().Before(exp) {
		delete(ss.m, id)
		return false
	}
	return ok
}

func (ss *sessions) end(id string) {
	ss.mu.Lock()
	delete(ss.m, id)
	ss.mu.Unlock()
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// authorized reports whether r carries the token or a valid session.
func (s *Server) authorized(r *http.Request) bool {
	if s.opts.Token == "" {
		return true
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		return ok && strings.EqualFold(scheme, "Bearer") && equal(strings.TrimSpace(tok), s.opts.Token)
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		return s.sessions.valid(c.Value)
	}
	return false
}

// throttled answers 429 when r's address is locked out after wrong
// tokens; the token it carries is not looked at then.
func (s *Server) throttled(w http.ResponseWriter, r *http.Request) bool {
	wait, ok := s.opts.Throttle.Check(remoteKey(r))
	if ok {
		return false
	}
	secs := max(int(math.Ceil(wait.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeError(w, http.StatusTooManyRequests, fmt.Sprintf("too many wrong tokens; retry in %ds", secs))
	return true
}

// wrongToken counts a wrong token (or session) against r's address.
func (s *Server) wrongToken(r *http.Request) {
	if d := s.opts.Throttle.Failure(remoteKey(r)); d > 0 {
		s.log.Warn("admin: address locked out after wrong tokens", "remote", r.RemoteAddr, "lockout", d)
	}
}

func remoteKey(r *http.Request) string {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return auth.Key(net.TCPAddrFromAddrPort(ap))
	}
	return r.RemoteAddr
}

func (s *Server) requireAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Token != "" && s.throttled(w, r) {
			return
		}
		if !s.authorized(r) {
			if r.Header.Get("Authorization") != "" {
				s.wrongToken(r) // a guess; a missing or stale cookie is not
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="smss-admin"`)
			writeError(w, http.StatusUnauthorized, "unauthorized: send Authorization: Bearer <admin.token>")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// login checks a token sent as a form field or JSON {"token": …} and sets
// the session cookie. Without a token configured it just succeeds.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.opts.Token == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if s.throttled(w, r) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLoginBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "login body too large")
		return
	}
	var token string
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/json" {
		var req struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "login body: "+err.Error())
			return
		}
		token = req.Token
	} else {
		form, err := url.ParseQuery(string(body))
		if err != nil {
			writeError(w, http.StatusBadRequest, "login body: "+err.Error())
			return
		}
		token = form.Get("token")
	}
	if !equal(token, s.opts.Token) {
		s.log.Warn("admin login failed", "remote", r.RemoteAddr)
		s.wrongToken(r)
		writeError(w, http.StatusUnauthorized, "wrong token")
		return
	}
	s.opts.Throttle.Success(remoteKey(r))
	id, exp, err := s.sessions.create()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "session: "+err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: id, Path: "/", Expires: exp, MaxAge: int(s.opts.SessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	w.WriteHeader(http.StatusNoContent)
}

// logout ends the session server side (a copy of the cookie stops working
// too) and clears the cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.sessions.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	w.WriteHeader(http.StatusNoContent)
}

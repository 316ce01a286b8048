package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// SessionCookie is the name of the dashboard's session cookie.
const SessionCookie = "smss_admin"

// maxLoginBody bounds what /api/login reads.
const maxLoginBody = 4096

// sessionValue derives the cookie value from the token, so the cookie never
// holds the token itself and changing the token invalidates every session.
func sessionValue(token string) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("smss admin session v1"))
	return hex.EncodeToString(mac.Sum(nil))
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
		return equal(c.Value, s.session)
	}
	return false
}

func (s *Server) requireAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
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
		writeError(w, http.StatusUnauthorized, "wrong token")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: s.session, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	w.WriteHeader(http.StatusNoContent)
}

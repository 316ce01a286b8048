package main

import (
	"flag"
	"os"
	"strings"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/client"
)

// secFlags are the global flags for a server with authentication or TLS.
type secFlags struct {
	user, passwordFile string
	tls                bool
	ca, serverName     string
	cert, key          string

	// resolved once per run: the password prompt must not repeat.
	opts    *client.Options
	optsErr error
}

func (s *secFlags) bind(fs *flag.FlagSet, e env) {
	if s.user == "" {
		s.user = e.getenv("SMSS_USER")
	}
	fs.StringVar(&s.user, "user", s.user, "log in as this user (default $SMSS_USER); password from --password-file, $SMSS_PASSWORD or a prompt")
	fs.StringVar(&s.passwordFile, "password-file", s.passwordFile, "file holding the password of --user")
	fs.BoolVar(&s.tls, "tls", s.tls, "connect with TLS (to the server's tls.listen port)")
	fs.StringVar(&s.ca, "ca", s.ca, "CA bundle (PEM) verifying the server's certificate (default: system roots); implies --tls")
	fs.StringVar(&s.serverName, "server-name", s.serverName, "name the server's certificate must carry (default: the --addr host); implies --tls")
	fs.StringVar(&s.cert, "cert", s.cert, "client certificate (PEM) for servers that require one; implies --tls")
	fs.StringVar(&s.key, "key", s.key, "key of --cert")
}

// clientOptions returns the TLS and credentials parts of client options.
func (g *globals) clientOptions() (*client.Options, error) {
	s := &g.sec
	if s.opts != nil || s.optsErr != nil {
		return s.opts, s.optsErr
	}
	s.opts, s.optsErr = s.resolve(g.e)
	return s.opts, s.optsErr
}

func (s *secFlags) resolve(e env) (*client.Options, error) {
	o := &client.Options{}
	if s.tls || s.ca != "" || s.serverName != "" || s.cert != "" || s.key != "" {
		tc, err := auth.ClientTLSConfig(s.ca, s.serverName, s.cert, s.key)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		o.TLS = tc
	}
	if s.user == "" {
		if s.passwordFile != "" {
			return nil, usagef("--password-file needs --user")
		}
		return o, nil
	}
	pw, err := s.password(e)
	if err != nil {
		return nil, err
	}
	o.Credentials = &client.Credentials{User: s.user, Password: pw}
	return o, nil
}

func (s *secFlags) password(e env) (string, error) {
	if s.passwordFile != "" {
		data, err := os.ReadFile(s.passwordFile)
		if err != nil {
			return "", err
		}
		if pw := strings.TrimRight(string(data), "\r\n"); pw != "" {
			return pw, nil
		}
		return "", usagef("password file %s is empty", s.passwordFile)
	}
	if pw := e.getenv("SMSS_PASSWORD"); pw != "" {
		return pw, nil
	}
	pw, ok, err := ttyPassword(e.stderr, "Password for "+s.user+": ")
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "", usagef("--user %s needs a password: --password-file, $SMSS_PASSWORD or a terminal", s.user)
	}
	return pw, nil
}

// dialer is the DialContext of a standalone subscriber.
func (g *globals) dialer() (client.DialFunc, error) {
	o, err := g.clientOptions()
	if err != nil {
		return nil, err
	}
	return client.SecureDialer(nil, o.TLS, o.Credentials)
}

package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// SecretLen is the size of a secret LoadOrCreateSecret creates; a shorter
// file is refused.
const SecretLen = 32

// LoadOrCreateSecret returns the server secret kept in path, creating the
// file (SecretLen random bytes, mode 0600, fsynced) when it does not
// exist. A file that other users may read or write, or shorter than
// SecretLen, is refused: the secret is what keeps unknown users' fake
// salts from being told apart from real ones.
func LoadOrCreateSecret(path string) ([]byte, error) {
	data, err := readSecret(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return data, err
	}
	secret := make([]byte, SecretLen)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("auth secret: random: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return readSecret(path) // another process won the race
	}
	if err != nil {
		return nil, fmt.Errorf("auth secret: %w", err)
	}
	if _, err := f.Write(secret); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("auth secret: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("auth secret: fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("auth secret: close %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("auth secret: %w", err)
	}
	return secret, nil
}

func readSecret(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("auth secret: %w", err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("auth secret %s: mode %v lets other users read or write it; chmod 600 it", path, fs.FileMode(perm))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth secret: %w", err)
	}
	if len(data) < SecretLen {
		return nil, fmt.Errorf("auth secret %s: %d bytes, want at least %d", path, len(data), SecretLen)
	}
	return data, nil
}

// NewAuthenticatorWithSecret is NewAuthenticator whose fake credentials of
// unknown users derive from secret instead of a per-process random key, so
// they stay the same across restarts (as real users' do).
func NewAuthenticatorWithSecret(store *Store, lim *Limiter, secret []byte) (*Authenticator, error) {
	if len(secret) < SecretLen {
		return nil, fmt.Errorf("auth: secret of %d bytes, want at least %d", len(secret), SecretLen)
	}
	a, err := NewAuthenticator(store, lim)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("smss fake credentials v1"))
	a.fakeKey = m.Sum(nil)
	return a, nil
}

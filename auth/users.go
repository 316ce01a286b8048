package auth

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/xdg-go/scram"
)

// FileVersion is the users-file format this package reads and writes.
const FileVersion = 1

// Iteration counts of the PBKDF2 step of SCRAM-SHA-256. RFC 7677 asks for at
// least 4096, which is also what clients accept at minimum; a server asking
// for more than MaxIterations is refused by clients (a hostile server could
// otherwise make them spin).
const (
	MinIterations     = 4096
	DefaultIterations = 100000
	MaxIterations     = 10000000
)

// Roles a user may hold besides topic grants.
const (
	RoleAdmin       = "admin"       // every command on every topic
	RoleReplication = "replication" // replica (64) and valid list (99), for slaves
)

// saltLen is the random salt length of new credentials, keyLen the
// SHA-256 output length of StoredKey and ServerKey.
const (
	saltLen = 16
	keyLen  = 32
)

// File is the users file. It holds no secret: a password cannot be
// recovered from Credentials, but they allow an offline guessing attack, so
// the file is written with mode 0600.
type File struct {
	Version int    `json:"version"`
	Users   []User `json:"users"`
}

// User is one entry of the users file.
type User struct {
	Name     string   `json:"name"`
	Disabled bool     `json:"disabled,omitempty"`
	Roles    []string `json:"roles,omitempty"`
	// Topic grants: exact names, "prefix.*" (every topic whose name starts
	// with "prefix."), or "*" (every topic).
	Publish   []string    `json:"publish,omitempty"`
	Subscribe []string    `json:"subscribe,omitempty"`
	Manage    []string    `json:"manage,omitempty"`
	SCRAM     Credentials `json:"scram"`
}

// Credentials are the SCRAM-SHA-256 stored credentials of RFC 5802 §3:
// enough to verify a client's proof and to prove the server's identity, not
// enough to log in. Byte fields are base64 in JSON.
type Credentials struct {
	Iterations int    `json:"iterations"`
	Salt       []byte `json:"salt"`
	StoredKey  []byte `json:"storedKey"`
	ServerKey  []byte `json:"serverKey"`
}

var userNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// ValidateUserName accepts 1-64 characters of letters, digits and ._@-,
// starting with a letter or digit: names that need no SASL escaping and are
// safe in logs and error texts.
func ValidateUserName(name string) error {
	if !userNameRe.MatchString(name) {
		return fmt.Errorf("user name %q: want 1-64 characters of letters, digits and ._@-, starting with a letter or digit", name)
	}
	return nil
}

// NewCredentials derives stored credentials from password with a fresh
// random salt. The password is normalised with SASLprep, as clients do.
func NewCredentials(password string, iterations int) (Credentials, error) {
	if password == "" {
		return Credentials{}, errors.New("empty password")
	}
	if iterations < MinIterations || iterations > MaxIterations {
		return Credentials{}, fmt.Errorf("iterations %d: want %d..%d", iterations, MinIterations, MaxIterations)
	}
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return Credentials{}, fmt.Errorf("random salt: %w", err)
	}
	c, err := scram.SHA256.NewClient("", password, "")
	if err != nil {
		return Credentials{}, fmt.Errorf("password: %w", err)
	}
	sc, err := c.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: iterations})
	if err != nil {
		return Credentials{}, fmt.Errorf("derive credentials: %w", err)
	}
	return Credentials{Iterations: iterations, Salt: salt, StoredKey: sc.StoredKey, ServerKey: sc.ServerKey}, nil
}

func (c *Credentials) validate() error {
	switch {
	case c.Iterations < MinIterations || c.Iterations > MaxIterations:
		return fmt.Errorf("scram.iterations %d: want %d..%d", c.Iterations, MinIterations, MaxIterations)
	case len(c.Salt) == 0:
		return errors.New("scram.salt is empty")
	case len(c.StoredKey) != keyLen:
		return fmt.Errorf("scram.storedKey has %d bytes, want %d", len(c.StoredKey), keyLen)
	case len(c.ServerKey) != keyLen:
		return fmt.Errorf("scram.serverKey has %d bytes, want %d", len(c.ServerKey), keyLen)
	}
	return nil
}

// ParseFile decodes and validates a users file. Unknown fields are errors,
// so that a misspelt grant never silently grants nothing (or everything).
func ParseFile(data []byte) (*File, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decode: data after the users object")
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

// ReadFile reads and validates the users file at path.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	f, err := ParseFile(data)
	if err != nil {
		return nil, fmt.Errorf("users file %s: %w", path, err)
	}
	return f, nil
}

// Validate checks the version, that names are valid and unique, roles
// known, patterns valid and credentials well formed.
func (f *File) Validate() error {
	if f.Version != FileVersion {
		return fmt.Errorf("version %d: this server reads version %d", f.Version, FileVersion)
	}
	seen := make(map[string]bool, len(f.Users))
	for i := range f.Users {
		u := &f.Users[i]
		if err := ValidateUserName(u.Name); err != nil {
			return fmt.Errorf("users[%d]: %w", i, err)
		}
		if seen[u.Name] {
			return fmt.Errorf("user %q listed twice", u.Name)
		}
		seen[u.Name] = true
		if err := u.validate(); err != nil {
			return fmt.Errorf("user %q: %w", u.Name, err)
		}
	}
	return nil
}

func (u *User) validate() error {
	for _, r := range u.Roles {
		if r != RoleAdmin && r != RoleReplication {
			return fmt.Errorf("unknown role %q (roles: %s, %s)", r, RoleAdmin, RoleReplication)
		}
	}
	for what, list := range map[string][]string{"publish": u.Publish, "subscribe": u.Subscribe, "manage": u.Manage} {
		for _, p := range list {
			if err := ValidatePattern(p); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	return u.SCRAM.validate()
}

// HasRole reports whether u holds role.
func (u *User) HasRole(role string) bool { return slices.Contains(u.Roles, role) }

// Lookup returns the user called name, or nil.
func (f *File) Lookup(name string) *User {
	for i := range f.Users {
		if f.Users[i].Name == name {
			return &f.Users[i]
		}
	}
	return nil
}

// Add appends u; its name must be new.
func (f *File) Add(u User) error {
	if err := ValidateUserName(u.Name); err != nil {
		return err
	}
	if f.Lookup(u.Name) != nil {
		return fmt.Errorf("user %q already exists", u.Name)
	}
	if err := u.validate(); err != nil {
		return fmt.Errorf("user %q: %w", u.Name, err)
	}
	f.Users = append(f.Users, u)
	return nil
}

// Remove deletes the user called name; false if there is none.
func (f *File) Remove(name string) bool {
	n := len(f.Users)
	f.Users = slices.DeleteFunc(f.Users, func(u User) bool { return u.Name == name })
	return len(f.Users) != n
}

// Marshal encodes f as indented JSON (users in the order held).
func (f *File) Marshal() ([]byte, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// WriteFile replaces path with f atomically: a temporary file in the same
// directory, mode 0600, fsynced, renamed over path, then the directory is
// fsynced. A reader (the server reloading) sees the old or the new file,
// never a mix.
func (f *File) WriteFile(path string) (err error) {
	data, err := f.Marshal()
	if err != nil {
		return fmt.Errorf("users file %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("users file: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp already uses 0600; Chmod makes it independent of that.
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("users file: chmod %s: %w", tmp.Name(), err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("users file: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("users file: fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("users file: close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("users file: rename to %s: %w", path, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("users file: open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("users file: fsync directory %s: %w", dir, err)
	}
	return nil
}

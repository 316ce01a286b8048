package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/smssmq/smss/auth"
)

const userUsage = `usage: smssctl user add NAME [grants] [--iterations N] [--password-stdin]
       smssctl user passwd NAME [--password-stdin]
       smssctl user set NAME [grants]
       smssctl user disable NAME | enable NAME | delete NAME
       smssctl user list

Edits the server's users file directly (--users-file, default
$SMSS_USERS_FILE); the server applies it on SIGHUP. The file is replaced
atomically and kept at mode 0600; PATH.lock beside it serialises concurrent
edits. Passwords are read from the terminal
(asked twice, not echoed) or, with --password-stdin, as the first line of
standard input; never from the command line.

grants (comma-separated; each replaces that list, "" clears it):
  --publish P,...     topics the user may publish to (pub, delay)
  --subscribe P,...   topics the user may subscribe to
  --manage P,...      topics the user may create and delete
  --roles R,...       admin (everything) and/or replication (slaves)
A pattern is an exact topic name, "prefix.*" or "*". Topic info needs any
grant on the topic; topic list shows the topics the user holds a grant on.
`

// listFlag is a comma-separated list flag that records whether it was set.
type listFlag struct {
	items []string
	set   bool
}

func (l *listFlag) String() string { return strings.Join(l.items, ",") }

func (l *listFlag) Set(s string) error {
	l.set, l.items = true, nil
	for _, it := range strings.Split(s, ",") {
		if it = strings.TrimSpace(it); it != "" {
			l.items = append(l.items, it)
		}
	}
	return nil
}

type userFlags struct {
	file                             string
	publish, subscribe, manage, role listFlag
	iterations                       int
	passwordStdin                    bool
}

func runUser(g *globals, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(g.e.stderr, userUsage)
		return exitUsage
	}
	action, args := args[0], args[1:]
	uf := &userFlags{file: g.e.getenv("SMSS_USERS_FILE"), iterations: auth.DefaultIterations}
	fset := g.flagSet("user "+action, userUsage)
	fset.StringVar(&uf.file, "users-file", uf.file, "the server's users file (auth.usersFile)")
	switch action {
	case "add", "set":
		bindGrants(fset, uf)
		if action == "add" {
			fset.IntVar(&uf.iterations, "iterations", uf.iterations, "PBKDF2 iterations of the stored credentials")
			fset.BoolVar(&uf.passwordStdin, "password-stdin", false, "read the password from the first line of stdin")
		}
	case "passwd":
		uf.iterations = 0
		fset.IntVar(&uf.iterations, "iterations", 0, "PBKDF2 iterations (default: keep the current count)")
		fset.BoolVar(&uf.passwordStdin, "password-stdin", false, "read the password from the first line of stdin")
	case "disable", "enable", "delete", "list":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(g.e.stdout, userUsage)
		return exitOK
	default:
		fmt.Fprintf(g.e.stderr, "smssctl: unknown user action %q\n\n%s", action, userUsage)
		return exitUsage
	}
	pos, code, done := parse(fset, args, g, false)
	if done {
		return code
	}
	if uf.file == "" {
		return fail(g, usagef("--users-file is required (or set $SMSS_USERS_FILE)"))
	}
	max := 1
	if action == "list" {
		max = 0
	}
	if err := needArgs(pos, max, max, "user name"); err != nil {
		return fail(g, err)
	}
	if action == "list" {
		return userList(g, uf.file)
	}
	if err := checkGrants(uf); err != nil {
		return fail(g, err)
	}
	if err := editUsers(g, uf, action, pos[0]); err != nil {
		return fail(g, err)
	}
	return exitOK
}

func bindGrants(fset *flag.FlagSet, uf *userFlags) {
	fset.Var(&uf.publish, "publish", "topic patterns the user may publish to")
	fset.Var(&uf.subscribe, "subscribe", "topic patterns the user may subscribe to")
	fset.Var(&uf.manage, "manage", "topic patterns the user may create and delete")
	fset.Var(&uf.role, "roles", "roles: admin, replication")
}

// editUsers applies one change under the file lock: read, change, write.
func editUsers(g *globals, uf *userFlags, action, name string) error {
	// Name the missing directory: otherwise the first error is about the
	// lock file beside the users file, which the operator never asked for.
	if dir := filepath.Dir(uf.file); dir != "" {
		if st, err := os.Stat(dir); err != nil {
			return fmt.Errorf("directory of the users file: %w (create it first, e.g. mkdir -p %s)", err, dir)
		} else if !st.IsDir() {
			return fmt.Errorf("directory of the users file: %s is not a directory", dir)
		}
	}
	unlock, err := lockUsersFile(uf.file)
	if err != nil {
		return err
	}
	defer unlock()
	f, err := auth.ReadFile(uf.file)
	switch {
	case errors.Is(err, fs.ErrNotExist) && action == "add":
		f = &auth.File{Version: auth.FileVersion}
	case err != nil:
		return err
	}
	var u *auth.User
	if action != "add" {
		if u = f.Lookup(name); u == nil {
			return fmt.Errorf("no user %q in %s", name, uf.file)
		}
	}
	var msg string
	switch action {
	case "add":
		if f.Lookup(name) != nil {
			return fmt.Errorf("user %q already exists in %s (use passwd or set)", name, uf.file)
		}
		if err := auth.ValidateUserName(name); err != nil {
			return usageError{err.Error()}
		}
		creds, err := newCredentials(g, uf)
		if err != nil {
			return err
		}
		nu := auth.User{Name: name, SCRAM: creds}
		applyGrants(&nu, uf)
		if err := f.Add(nu); err != nil {
			return usageError{err.Error()}
		}
		msg = "added user " + name
	case "passwd":
		if uf.iterations == 0 {
			uf.iterations = u.SCRAM.Iterations
		}
		creds, err := newCredentials(g, uf)
		if err != nil {
			return err
		}
		u.SCRAM = creds
		msg = "changed the password of " + name
	case "set":
		applyGrants(u, uf)
		msg = "updated the grants of " + name
	case "disable", "enable":
		u.Disabled = action == "disable"
		msg = action + "d user " + name
	case "delete":
		f.Remove(name)
		msg = "deleted user " + name
	}
	if err := f.WriteFile(uf.file); err != nil {
		return err
	}
	fmt.Fprintf(g.e.stdout, "%s in %s; send SIGHUP to the server to apply it\n", msg, uf.file)
	return nil
}

// checkGrants refuses bad patterns and roles before a password is asked.
func checkGrants(uf *userFlags) error {
	for _, l := range []*listFlag{&uf.publish, &uf.subscribe, &uf.manage} {
		for _, p := range l.items {
			if err := auth.ValidatePattern(p); err != nil {
				return usageError{err.Error()}
			}
		}
	}
	for _, r := range uf.role.items {
		if r != auth.RoleAdmin && r != auth.RoleReplication {
			return usagef("unknown role %q (roles: %s, %s)", r, auth.RoleAdmin, auth.RoleReplication)
		}
	}
	return nil
}

func applyGrants(u *auth.User, uf *userFlags) {
	for _, g := range []struct {
		f   *listFlag
		dst *[]string
	}{{&uf.publish, &u.Publish}, {&uf.subscribe, &u.Subscribe}, {&uf.manage, &u.Manage}, {&uf.role, &u.Roles}} {
		if g.f.set {
			*g.dst = slices.Clone(g.f.items)
		}
	}
}

// newCredentials reads a new password and derives credentials from it.
func newCredentials(g *globals, uf *userFlags) (auth.Credentials, error) {
	pw, err := readNewPassword(g, uf.passwordStdin)
	if err != nil {
		return auth.Credentials{}, err
	}
	creds, err := auth.NewCredentials(pw, uf.iterations)
	if err != nil {
		return auth.Credentials{}, usageError{err.Error()}
	}
	return creds, nil
}

// readNewPassword reads a password from stdin's first line, or asks twice
// on the terminal without echo.
func readNewPassword(g *globals, fromStdin bool) (string, error) {
	if fromStdin {
		line, err := bufio.NewReader(g.e.stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("read password from stdin: %w", err)
		}
		pw := strings.TrimRight(line, "\r\n")
		if pw == "" {
			return "", usagef("empty password on stdin")
		}
		return pw, nil
	}
	f, ok := g.e.stdin.(*os.File)
	if !ok || !isTerminal(f) {
		return "", usagef("stdin is not a terminal: pass the password with --password-stdin")
	}
	pw, err := promptPassword(f, g.e.stderr, "New password: ")
	if err != nil {
		return "", err
	}
	again, err := promptPassword(f, g.e.stderr, "Repeat password: ")
	if err != nil {
		return "", err
	}
	if pw != again {
		return "", errors.New("the passwords differ")
	}
	if pw == "" {
		return "", errors.New("empty password")
	}
	return pw, nil
}

// userList prints the users without their credentials.
func userList(g *globals, path string) int {
	f, err := auth.ReadFile(path)
	if err != nil {
		return fail(g, err)
	}
	type row struct {
		Name       string   `json:"name"`
		Disabled   bool     `json:"disabled"`
		Roles      []string `json:"roles"`
		Publish    []string `json:"publish"`
		Subscribe  []string `json:"subscribe"`
		Manage     []string `json:"manage"`
		Iterations int      `json:"iterations"`
	}
	rows := make([]row, 0, len(f.Users))
	for _, u := range f.Users {
		rows = append(rows, row{u.Name, u.Disabled, nonNil(u.Roles), nonNil(u.Publish), nonNil(u.Subscribe),
			nonNil(u.Manage), u.SCRAM.Iterations})
	}
	if g.json {
		if err := writeJSON(g.e.stdout, rows); err != nil {
			return fail(g, err)
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(g.e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tROLES\tPUBLISH\tSUBSCRIBE\tMANAGE")
	for _, r := range rows {
		status := "enabled"
		if r.Disabled {
			status = "disabled"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, status, dash(r.Roles), dash(r.Publish), dash(r.Subscribe), dash(r.Manage))
	}
	tw.Flush()
	return exitOK
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func dash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

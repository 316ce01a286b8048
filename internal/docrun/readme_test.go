//go:build unix

package docrun

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/smssmq/smss/internal/smsstest"
)

func TestMain(m *testing.M) { smsstest.Main(m) }

// block is one fenced code block of a Markdown file.
type block struct {
	lang  string
	line  int // of the opening fence
	lines []string
}

func codeBlocks(t *testing.T, path string) []block {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []block
	var cur *block
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &block{lang: strings.TrimPrefix(l, "```"), line: n}
		case cur != nil && strings.HasPrefix(l, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// docPort is a port the docs use: 1230x (clients), 1231x (slaves), 1240x
// (raft).
var docPort = regexp.MustCompile(`\b12(30[0-9]|31[0-9]|40[0-9])\b`)

// wordEnd matches a string that ends in a word character.
var wordEnd = regexp.MustCompile(`\w$`)

// comment is a trailing "  # ..." comment of a command line.
var comment = regexp.MustCompile(`\s{2,}#.*$`)

type walk struct {
	t         *testing.T
	dir       string
	smss      string
	ports     map[string]string
	daemons   map[string]*smsstest.Proc // by the mapped port they serve
	yaml      []string                  // the last yaml block, mapped
	yamlAt    string                    // the file it was written to, "" before
	installed map[string]bool           // programs on PATH in dir, built by the test
	standIns  map[string]string         // a doc's address or path → the test's
	used      map[string]bool           // the stand-ins a command or yaml block named
	docRe     *regexp.Regexp            // the docs' ports and the stand-ins
	services  map[string]func(where string, p *smsstest.Proc)
}

func newWalk(t *testing.T) *walk {
	w := &walk{t: t, dir: t.TempDir(), smss: smsstest.SmssBinary(t), ports: map[string]string{}, daemons: map[string]*smsstest.Proc{},
		installed: map[string]bool{}, standIns: map[string]string{}, used: map[string]bool{}, services: map[string]func(string, *smsstest.Proc){}}
	w.install("smssctl", smsstest.Binary(t, "./cmd/smssctl"))
	return w
}

// install puts the built binary bin on PATH in the walk's directory as
// name (and as ./name), for the docs' `go build -o name ./cmd/name`.
func (w *walk) install(name, bin string) {
	data, err := os.ReadFile(bin)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.dir, name), data, 0o755); err != nil {
		w.t.Fatal(err)
	}
	w.installed[name] = true
}

// standIn makes every docAddr of the commands and yaml blocks testAddr: a
// host the docs name (nats1:4222) for a server the test runs. Each must be
// named by the doc, or runFile fails: a stand-in nothing uses means the
// doc changed under the test.
func (w *walk) standIn(docAddr, testAddr string) {
	w.standIns[docAddr] = testAddr
	w.docRe = nil
}

// serve makes the commands of program name services: each runs in the
// background until check returns (having seen it do what the doc says it
// does), then gets SIGINT and must exit 0.
func (w *walk) serve(name string, check func(where string, p *smsstest.Proc)) {
	w.services[name] = check
}

// mapDoc replaces the docs' ports with free ones and the stand-ins'
// addresses with the test's, in one pass so that no replacement is mapped
// again.
func (w *walk) mapDoc(s string) string {
	if w.docRe == nil {
		var alts []string
		for a := range w.standIns {
			q := regexp.QuoteMeta(a)
			if wordEnd.MatchString(a) {
				q += `\b` // k1:9092 is not the start of k1:90921
			}
			alts = append(alts, q)
		}
		// The longest first: of two that start at the same place, the
		// alternation takes the first that matches.
		sort.Slice(alts, func(i, j int) bool { return len(alts[i]) > len(alts[j]) })
		w.docRe = regexp.MustCompile(strings.Join(append(alts, docPort.String()), "|"))
	}
	return w.docRe.ReplaceAllStringFunc(s, func(p string) string {
		if a, ok := w.standIns[p]; ok {
			w.used[p] = true
			return a
		}
		if m, ok := w.ports[p]; ok {
			return m
		}
		m := strconv.Itoa(smsstest.FreePort(w.t))
		w.ports[p] = m
		return m
	})
}

func TestReadmeCommands(t *testing.T) { runDoc(t, "README.md", 10) }

func TestGettingStartedCommands(t *testing.T) { runDoc(t, "docs/getting-started.md", 15) }

func TestClusterDocCommands(t *testing.T) { runDoc(t, "docs/cluster.md", 4) }

func TestClientDocCommands(t *testing.T) { runDoc(t, "docs/client.md", 17) }

func TestFailoverDocCommands(t *testing.T) { runDoc(t, "docs/durability-and-failover.md", 10) }

// runDoc runs the commands of one Markdown file in a directory of its own;
// at least minimum of them must run.
func runDoc(t *testing.T, doc string, minimum int) { newWalk(t).runFile(doc, minimum) }

// runFile runs the commands of doc in the walk's directory; at least
// minimum of them must run, and every stand-in must have been named.
func (w *walk) runFile(doc string, minimum int) {
	t := w.t
	root, err := smsstest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, b := range codeBlocks(t, filepath.Join(root, doc)) {
		switch b.lang {
		case "yaml":
			w.yaml, w.yamlAt = nil, ""
			for _, l := range b.lines {
				w.yaml = append(w.yaml, w.mapDoc(l))
			}
		case "sh":
			for i := 0; i < len(b.lines); i++ {
				where := fmt.Sprintf("%s:%d: %s", doc, b.line+1+i, b.lines[i])
				// A line ending in a backslash goes on on the next one, as
				// in a shell.
				l := b.lines[i]
				for strings.HasSuffix(l, "\\") && i+1 < len(b.lines) {
					i++
					l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(b.lines[i])
				}
				if w.run(where, l) {
					ran++
				}
			}
		}
	}
	if ran < minimum {
		t.Fatalf("ran %d commands of %s; its blocks were not found as expected", ran, doc)
	}
	for a := range w.standIns {
		if !w.used[a] {
			t.Fatalf("%s no longer names %s, which the test stands in for", doc, a)
		}
	}
}

// goBuild is a doc's build of a program of cmd/ under its own name.
var goBuild = regexp.MustCompile(`^go build -o (\S+) \./cmd/(\S+)$`)

// run runs one command line and reports whether it ran one.
func (w *walk) run(where, line string) bool {
	t := w.t
	t.Helper()
	untilOutput := strings.Contains(line, "Ctrl-C")
	note := ""
	if m := comment.FindString(line); m != "" {
		note = m
		line = strings.TrimSpace(strings.TrimSuffix(line, m))
	}
	line = strings.TrimSpace(line)
	if m := goBuild.FindStringSubmatch(line); m != nil && m[1] == m[2] && (m[1] == "smss" || w.installed[m[1]]) {
		return false // built already: w.smss, or installed on PATH
	}
	switch {
	case line == "", strings.HasPrefix(line, "#"), strings.HasPrefix(line, "bash .ci/run"):
		return false
	case suiteCommand(line):
		t.Logf("%s (checked, not run)", where)
		w.checkSuite(where, line)
		return true
	case strings.HasPrefix(line, "go run ./examples/"):
		// The example, built, against the mapped 12301.
		f := strings.Fields(strings.TrimPrefix(line, "go run "))
		line = smsstest.Binary(t, f[0]) + " -addr 127.0.0.1:12301 " + strings.Join(f[1:], " ")
	case strings.HasPrefix(line, "go run ./cmd/smss "), strings.HasPrefix(line, "smss "):
		args := strings.Fields(w.mapDoc(strings.TrimPrefix(strings.TrimPrefix(line, "go run ./cmd/smss "), "smss ")))
		t.Logf("%s", where)
		w.startServers(where, args, note)
		return true
	}
	line = w.mapDoc(line)
	t.Logf("%s", where)
	if check := w.services[strings.TrimPrefix(strings.Fields(line)[0], "./")]; check != nil {
		w.runService(where, line, check)
		return true
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := w.sh(line, untilOutput)
		if err == nil {
			return true
		}
		// A cluster elects its master within a few seconds of starting:
		// what a reader would wait for too.
		if time.Now().After(deadline) {
			t.Fatalf("%s\n%v\n%s", where, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sh runs line with sh in the walk's directory.
func (w *walk) sh(line string, untilOutput bool) (string, error) {
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = w.dir
	// Its own process group, ended as a whole; output copying does not
	// outlive the command.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = w.env()
	var out smsstest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if !untilOutput {
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			return "", err
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return out.String(), err
		case <-time.After(60 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return out.String(), fmt.Errorf("still running after 60 s")
		}
	}
	// Runs until Ctrl-C: until it printed something, then SIGINT.
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if !smsstest.Poll(20*time.Second, func() bool { return out.String() != "" }) {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return out.String(), fmt.Errorf("printed nothing within 20 s")
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			ws, _ := ee.Sys().(syscall.WaitStatus)
			if ee.ExitCode() == 130 || (ws.Signaled() && ws.Signal() == syscall.SIGINT) {
				err = nil // interrupted, as asked
			}
		}
		return out.String(), err
	case <-time.After(20 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return out.String(), fmt.Errorf("did not end within 20 s of Ctrl-C")
	}
}

// env is the environment of the doc's commands: smssctl as installed (on
// PATH) is the built one too, and so is every other installed program.
func (w *walk) env() []string {
	return append(os.Environ(), "SMSS_ADDR=127.0.0.1:"+w.ports["12301"], "PATH="+w.dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// runService runs line, a command of a service, in the background until
// check returns, then stops it with SIGINT; it must exit 0.
func (w *walk) runService(where, line string, check func(where string, p *smsstest.Proc)) {
	t := w.t
	t.Helper()
	// exec: the signal reaches the program, not a shell waiting for it.
	cmd := exec.Command("sh", "-c", "exec "+line)
	cmd.Dir = w.dir
	cmd.Env = w.env()
	p := smsstest.StartProc(t, cmd, nil)
	defer func() {
		if t.Failed() {
			t.Logf("%s: its output:\n%s", where, p.Out.String())
		}
	}()
	check(where, p)
	p.Signal(syscall.SIGINT)
	if err := p.Wait(20 * time.Second); err != nil {
		t.Fatalf("%s: exit after SIGINT: %v", where, err)
	}
}

// startServers starts smss with args in the background (and, for "the
// same with b.yaml and c.yaml", the other nodes), stopping a server of an
// earlier section that serves the same port.
func (w *walk) startServers(where string, args []string, note string) {
	t := w.t
	t.Helper()
	cfgs := []string{""}
	for i, a := range args {
		if a == "-config" && i+1 < len(args) {
			cfgs[0] = args[i+1]
		}
	}
	if cfgs[0] != "" {
		if w.yaml == nil {
			t.Fatalf("%s: no yaml block before it for %s", where, cfgs[0])
		}
		switch n := strings.TrimSuffix(cfgs[0], ".yaml"); {
		case w.yamlAt == "" || w.yamlAt == cfgs[0]:
			w.writeFile(cfgs[0], strings.Join(w.yaml, "\n")+"\n")
			w.yamlAt = cfgs[0]
		case w.yamlAt == "a.yaml" && (n == "b" || n == "c"):
			// "b.yaml: port 12302, path ./data-b, node b; c.yaml: ..."
			w.writeFile(cfgs[0], w.otherNode(n))
		default:
			t.Fatalf("%s: %s is not the file of the yaml block before it (%s)", where, cfgs[0], w.yamlAt)
		}
		if strings.Contains(note, "the same with b.yaml and c.yaml") {
			for _, n := range []string{"b", "c"} {
				w.writeFile(n+".yaml", w.otherNode(n))
				cfgs = append(cfgs, n+".yaml")
			}
		}
	} else {
		// The embedded defaults listen on 12301: the one change is the port.
		w.writeFile("default-port.yaml", "port: "+w.mapDoc("12301")+"\n")
		args = append(args, "-config", "default-port.yaml")
	}
	for _, cfg := range cfgs {
		a := append([]string(nil), args...)
		if cfg != "" {
			for i := range a {
				if a[i] == "-config" {
					a[i+1] = cfg
				}
			}
		}
		port := w.portOf(a)
		if old := w.daemons[port]; old != nil {
			old.Term()
		}
		cmd := exec.Command(w.smss, a...)
		cmd.Dir = w.dir
		w.daemons[port] = smsstest.StartProc(t, cmd, regexp.MustCompile(`msg="smss listening" addr=(\S+)`))
	}
}

// portOf is the client port a server started with args serves.
func (w *walk) portOf(args []string) string {
	for i, a := range args {
		if a == "-config" {
			b, err := os.ReadFile(filepath.Join(w.dir, args[i+1]))
			if err != nil {
				w.t.Fatal(err)
			}
			if m := regexp.MustCompile(`(?m)^port: (\d+)`).FindSubmatch(b); m != nil {
				return string(m[1])
			}
		}
	}
	return w.ports["12301"]
}

// otherNode is a.yaml for node n: its client port, data directory and, in
// a cluster's config, its node id.
func (w *walk) otherNode(n string) string {
	a := strings.Join(w.yaml, "\n") + "\n"
	port := w.mapDoc(map[string]string{"b": "12302", "c": "12303"}[n])
	out := regexp.MustCompile(`(?m)^port: \d+`).ReplaceAllString(a, "port: "+port)
	out = strings.Replace(out, "path: ./data-a", "path: ./data-"+n, 1)
	cluster := strings.Contains(a, "node: a")
	out = strings.Replace(out, "node: a", "node: "+n, 1)
	if !strings.Contains(out, "path: ./data-"+n) || !strings.Contains(out, "port: "+port) || (cluster && !strings.Contains(out, "node: "+n)) {
		w.t.Fatalf("a.yaml is not as the docs' three-node sections describe it (port 12301, path ./data-a, node a in a cluster):\n%s", a)
	}
	return out
}

func (w *walk) writeFile(name, content string) {
	if err := os.WriteFile(filepath.Join(w.dir, name), []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

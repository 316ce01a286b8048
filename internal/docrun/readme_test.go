//go:build unix

package docrun

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// comment is a trailing "  # ..." comment of a command line.
var comment = regexp.MustCompile(`\s{2,}#.*$`)

type walk struct {
	t       *testing.T
	dir     string
	smss    string
	ports   map[string]string
	daemons map[string]*smsstest.Proc // by the mapped port they serve
	yaml    []string                  // the last yaml block, ports mapped
	yamlAt  string                    // the file it was written to, "" before
}

func (w *walk) mapPorts(s string) string {
	return docPort.ReplaceAllStringFunc(s, func(p string) string {
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
func runDoc(t *testing.T, doc string, minimum int) {
	root, err := smsstest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	w := &walk{t: t, dir: t.TempDir(), smss: smsstest.SmssBinary(t), ports: map[string]string{}, daemons: map[string]*smsstest.Proc{}}
	ctl := smsstest.Binary(t, "./cmd/smssctl")
	data, err := os.ReadFile(ctl)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "smssctl"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, b := range codeBlocks(t, filepath.Join(root, doc)) {
		switch b.lang {
		case "yaml":
			w.yaml, w.yamlAt = nil, ""
			for _, l := range b.lines {
				w.yaml = append(w.yaml, w.mapPorts(l))
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
}

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
	switch {
	case line == "", strings.HasPrefix(line, "bash .ci/run"), strings.HasPrefix(line, "go test"),
		line == "go build -o smssctl ./cmd/smssctl", line == "go build -o smss ./cmd/smss":
		return false
	case strings.HasPrefix(line, "go run ./examples/"):
		// The example, built, against the mapped 12301.
		f := strings.Fields(strings.TrimPrefix(line, "go run "))
		line = smsstest.Binary(t, f[0]) + " -addr 127.0.0.1:12301 " + strings.Join(f[1:], " ")
	case strings.HasPrefix(line, "go run ./cmd/smss "), strings.HasPrefix(line, "smss "):
		args := strings.Fields(w.mapPorts(strings.TrimPrefix(strings.TrimPrefix(line, "go run ./cmd/smss "), "smss ")))
		t.Logf("%s", where)
		w.startServers(where, args, note)
		return true
	}
	line = w.mapPorts(line)
	t.Logf("%s", where)
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
	// smssctl as installed (on PATH) is the built one too.
	cmd.Env = append(os.Environ(), "SMSS_ADDR=127.0.0.1:"+w.ports["12301"], "PATH="+w.dir+string(os.PathListSeparator)+os.Getenv("PATH"))
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
		w.writeFile("default-port.yaml", "port: "+w.mapPortsOf("12301")+"\n")
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

func (w *walk) mapPortsOf(p string) string { return w.mapPorts(p) }

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
	port := w.mapPorts(map[string]string{"b": "12302", "c": "12303"}[n])
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

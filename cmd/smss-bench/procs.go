package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startTimeout bounds how long a server may take to listen.
const startTimeout = 30 * time.Second

// env owns everything a run starts: one temp root holding the smss binary,
// every server's data directory and logs. close kills the servers and
// removes the root.
type env struct {
	root string
	keep bool

	mu    sync.Mutex
	procs []*server
	seq   int
}

func newEnv(keep bool) (*env, error) {
	root, err := os.MkdirTemp("", "smss-bench-")
	if err != nil {
		return nil, fmt.Errorf("create temp dir: %w", err)
	}
	return &env{root: root, keep: keep}, nil
}

// dir returns a fresh directory under the root.
func (e *env) dir(prefix string) (string, error) {
	e.mu.Lock()
	e.seq++
	n := e.seq
	e.mu.Unlock()
	d := filepath.Join(e.root, fmt.Sprintf("%s-%d", prefix, n))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", d, err)
	}
	return d, nil
}

func (e *env) close() {
	e.mu.Lock()
	procs := e.procs
	e.procs = nil
	e.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	if e.keep {
		fmt.Fprintf(os.Stderr, "smss-bench: kept %s\n", e.root)
		return
	}
	os.RemoveAll(e.root)
}

// buildSmss compiles the server into the temp root. It must run inside the
// smss module (the benchmark's own source tree).
func (e *env) buildSmss(ctx context.Context) (string, error) {
	bin := filepath.Join(e.root, "smss")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/smssmq/smss/cmd/smss")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build smss (run inside the smss module or pass --smss-bin): %w\n%s", err, out)
	}
	return bin, nil
}

// server is a process the benchmark started.
type server struct {
	name    string
	cmd     *exec.Cmd
	addr    string
	dir     string // working directory
	dataDir string // what disk usage is measured on
	logPath string
	exited  chan struct{}
	err     error
}

func (s *server) pid() int { return s.cmd.Process.Pid }

func (s *server) kill() {
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// stop kills the server and forgets it.
func (e *env) stop(s *server) {
	if s == nil {
		return
	}
	s.kill()
	e.mu.Lock()
	for i, p := range e.procs {
		if p == s {
			e.procs = append(e.procs[:i], e.procs[i+1:]...)
			break
		}
	}
	e.mu.Unlock()
}

// logTail returns the end of a server's log, for error messages.
func (s *server) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func (e *env) start(s *server) error {
	// The children die with the benchmark even if it is killed outright.
	s.cmd.SysProcAttr = childProcAttr()
	s.exited = make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	e.mu.Lock()
	e.procs = append(e.procs, s)
	e.mu.Unlock()
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	return nil
}

var listenRe = regexp.MustCompile(`msg="smss listening".*addr=(\S+)`)

// smssConfig is the config file of a server the benchmark starts: port 0
// (the address is taken from the log), hot-path logs off.
func smssConfig(dataDir string, flush int) string {
	return fmt.Sprintf("host: 127.0.0.1\nport: 0\nlog:\n  path: stdout\n  sample: 0\nstore:\n  path: %s\n  flushLevel: %d\n",
		dataDir, flush)
}

// startSmss starts an smss server (a slave when master is not empty) and
// waits until it logs its listening address.
// extra is appended to the config file (YAML sections).
func (e *env) startSmss(ctx context.Context, bin string, flush int, master, extra string) (*server, error) {
	name := "smss"
	if master != "" {
		name = "smss-slave"
	}
	dir, err := e.dir(name)
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, "data")
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(smssConfig(dataDir, flush)+extra), 0o644); err != nil {
		return nil, fmt.Errorf("write smss config: %w", err)
	}
	args := []string{"-config", cfgPath}
	if master != "" {
		host, port, err := net.SplitHostPort(master)
		if err != nil {
			return nil, fmt.Errorf("master address %q: %w", master, err)
		}
		args = append(args, "-role", "slave", "-host", host, "-port", port, "-event", "0")
	}
	return e.runSmss(ctx, bin, name, dir, args)
}

// runSmss starts smss with args in dir (its config and data there) and
// waits until it logs its listening address.
func (e *env) runSmss(ctx context.Context, bin, name, dir string, args []string) (*server, error) {
	dataDir := filepath.Join(dir, "data")
	s := &server{name: name, cmd: exec.Command(bin, args...), dir: dir, dataDir: dataDir,
		logPath: filepath.Join(dir, "server.log")}
	s.cmd.Dir = dir
	logf, err := os.Create(s.logPath)
	if err != nil {
		return nil, fmt.Errorf("create server log: %w", err)
	}
	pr, pw := io.Pipe()
	s.cmd.Stdout, s.cmd.Stderr = pw, pw
	if err := e.start(s); err != nil {
		logf.Close()
		return nil, err
	}
	addrc := make(chan string, 1)
	go func() {
		defer logf.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if m := listenRe.FindStringSubmatch(line); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		io.Copy(logf, pr)
	}()
	go func() {
		<-s.exited
		pw.Close()
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case s.addr = <-addrc:
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("%s exited during start-up (%v):\n%s", name, s.err, s.logTail())
	case <-timer.C:
		e.stop(s)
		return nil, fmt.Errorf("%s did not listen within %s:\n%s", name, startTimeout, s.logTail())
	case <-ctx.Done():
		e.stop(s)
		return nil, ctx.Err()
	}
}

// appendfsync maps a smss flushLevel to the comparable Redis policy.
func appendfsync(flush int) string {
	switch flush {
	case 0:
		return "no"
	case 2:
		return "always"
	default:
		return "everysec"
	}
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before Redis binds; startRedis retries.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis starts redis-server with an append-only file whose fsync policy
// matches flush, no RDB snapshots, and its data in a temp directory.
func (e *env) startRedis(ctx context.Context, bin string, flush int) (*server, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := e.tryStartRedis(ctx, bin, flush)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func (e *env) tryStartRedis(ctx context.Context, bin string, flush int) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	dir, err := e.dir("redis")
	if err != nil {
		return nil, err
	}
	// Redis 7 keeps the append-only files in appendonlydir.
	s := &server{name: "redis-server", dir: dir, dataDir: filepath.Join(dir, "appendonlydir"), logPath: filepath.Join(dir, "redis.log"),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--appendonly", "yes", "--appendfsync", appendfsync(flush), "--save", "",
		"--daemonize", "no", "--logfile", s.logPath)
	s.cmd.Dir = dir
	if err := e.start(s); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := dialRedis(s.addr)
		if err == nil {
			err = c.ping()
			c.close()
			if err == nil {
				return s, nil
			}
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("redis-server exited during start-up (%v):\n%s", s.err, s.logTail())
		case <-ctx.Done():
			e.stop(s)
			return nil, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			e.stop(s)
			return nil, fmt.Errorf("redis-server did not answer PING within %s: %v\n%s", startTimeout, err, s.logTail())
		}
		time.Sleep(10 * time.Millisecond) // polling a port that is not open yet: nothing to wait on
	}
}

// procMem reads VmRSS and VmHWM (KiB) of pid.
func procMem(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	return parseProcStatus(string(b))
}

func parseProcStatus(s string) (rss, hwm int64, err error) {
	found := 0
	for _, line := range strings.Split(s, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("unexpected %s line %q", key, line)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse %s: %w", key, err)
		}
		if key == "VmRSS" {
			rss = n
		} else {
			hwm = n
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("VmRSS/VmHWM not found in /proc status")
	}
	return rss, hwm, nil
}

// rssSampler polls a pid's VmRSS every 100 ms and keeps the maximum.
type rssSampler struct {
	pid     int
	stop    chan struct{}
	done    chan struct{}
	max     int64
	samples int
}

// startRSS starts sampling; initial (the reading just taken) counts as the
// first sample, so the maximum is never below it.
func startRSS(pid int, initial int64) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{}), max: initial}
	go func() {
		defer close(s.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, _, err := procMem(pid); err == nil {
				s.max = max(s.max, rss)
				s.samples++
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) finish() (maxKiB int64, samples int) {
	close(s.stop)
	<-s.done
	if rss, _, err := procMem(s.pid); err == nil {
		s.max = max(s.max, rss)
	}
	return s.max, s.samples
}

// diskUsage sums the apparent sizes of the regular files under dir, per
// top-level entry, and the bytes allocated to them in total (st_blocks, what
// du reports): badger preallocates sparse files, so apparent sizes overstate
// what the meta store occupies.
func diskUsage(dir string) (allocated int64, parts map[string]int64, err error) {
	parts = map[string]int64{}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking (e.g. a temp file)
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		top, _, _ := strings.Cut(rel, string(filepath.Separator))
		parts[top] += info.Size()
		allocated += allocatedBytes(info)
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("disk usage of %s: %w", dir, err)
	}
	return allocated, parts, nil
}

// clockTick is USER_HZ, the unit of utime/stime in /proc/PID/stat; it is 100
// on every Linux architecture Go supports.
const clockTick = 100

// procCPU returns the user+system CPU time pid has used.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

func parseProcStat(s string) (time.Duration, error) {
	// The command name (field 2) may hold spaces; fields after it start
	// at the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse utime/stime %q %q", f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTick, nil
}

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
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

const (
	startTimeout = 60 * time.Second
	stopTimeout  = 30 * time.Second
)

// server is one smss process (master or slave) and its directory:
// <dir>/config.yaml, <dir>/data and <dir>/smss.log (every start appends).
type server struct {
	name string
	bin  string
	dir  string
	port int // fixed listen port; 0 picks one per start
	args []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	addr    string
	exited  chan struct{}
	waitErr error
	alarms  []string // log lines that mean a defect, whenever they appear
	errors  int      // ERROR lines logged over the run
	repairs int      // starts whose recovery repaired something
	starts  int
}

var (
	listenRe = regexp.MustCompile(`smss listening.*addr=(\S+)`)
	repairRe = regexp.MustCompile(`truncating|topicBlocksAppended=[1-9]|re-applied topic create|completed topic delete`)
	// Lines that are a defect whatever the moment: the slave gave up, an
	// invariant check fired, or a goroutine panicked.
	alarmRe = regexp.MustCompile(`REPLICATION STOPPED|BUG:|panic|data damaged`)
)

func (s *server) dataDir() string { return filepath.Join(s.dir, "data") }

// writeConfig writes the server's config: a small file size so files roll
// often, a short alive interval so streams notice restarts quickly, and
// the given flush level.
func (s *server) writeConfig(flushLevel int) error {
	cfg := fmt.Sprintf(`host: 127.0.0.1
port: %d
log:
  path: stdout
  sample: 0
store:
  path: %s
  maxLogSize: 262144
  flushLevel: %d
timeout:
  server:
    alive: 1000
background:
  firstExecSecond: 1
`, s.port, s.dataDir(), flushLevel)
	return os.WriteFile(filepath.Join(s.dir, "config.yaml"), []byte(cfg), 0o644)
}

// start runs the server and waits until it listens.
func (s *server) start(flushLevel int) error {
	if err := s.writeConfig(flushLevel); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "smss.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logf.Close()
		return err
	}
	cmd := exec.Command(s.bin, append([]string{"-config", filepath.Join(s.dir, "config.yaml")}, s.args...)...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		logf.Close()
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	pw.Close()
	fmt.Fprintf(logf, "=== smss-torture: %s start %d, pid %d, flushLevel %d, %s\n", s.name, s.starts+1, cmd.Process.Pid, flushLevel, time.Now().Format(time.RFC3339Nano))
	listening := make(chan string, 1)
	exited := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.addr, s.exited, s.waitErr = cmd, "", exited, nil
	s.starts++
	s.mu.Unlock()
	go s.readLog(pr, logf, listening)
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(exited)
	}()
	select {
	case addr := <-listening:
		s.mu.Lock()
		s.addr = addr
		s.mu.Unlock()
		return nil
	case <-exited:
		return fmt.Errorf("%s exited during start-up: %v (see %s)", s.name, s.exitErr(), filepath.Join(s.dir, "smss.log"))
	case <-time.After(startTimeout):
		s.kill()
		return fmt.Errorf("%s did not listen within %v (see %s)", s.name, startTimeout, filepath.Join(s.dir, "smss.log"))
	}
}

// readLog copies the process output to its log file and watches it.
func (s *server) readLog(pr *os.File, logf *os.File, listening chan<- string) {
	defer logf.Close()
	defer pr.Close()
	br := bufio.NewReaderSize(pr, 64<<10)
	repaired := false
	for {
		line, err := br.ReadString('\n')
		if len(line) > 0 {
			logf.WriteString(line)
			if m := listenRe.FindStringSubmatch(line); m != nil {
				select {
				case listening <- m[1]:
				default:
				}
			}
			s.mu.Lock()
			if alarmRe.MatchString(line) {
				s.alarms = append(s.alarms, strings.TrimSpace(line))
			}
			if strings.Contains(line, "level=ERROR") {
				s.errors++
			}
			if !repaired && repairRe.MatchString(line) {
				repaired = true
				s.repairs++
			}
			s.mu.Unlock()
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(logf, "=== smss-torture: reading output: %v\n", err)
			}
			return
		}
	}
}

func (s *server) exitErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitErr
}

// address returns where the running server listens.
func (s *server) address() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// dump ends a stuck server with SIGQUIT: the Go runtime writes every
// goroutine's stack to its log before it exits, which shows where it hangs.
func (s *server) dump() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		s.kill()
	}
}

// term stops the server with SIGTERM and requires a clean exit.
func (s *server) term() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		s.kill()
		return fmt.Errorf("%s did not stop within %v of SIGTERM", s.name, stopTimeout)
	}
	if err := s.exitErr(); err != nil {
		return fmt.Errorf("%s exit after SIGTERM: %v", s.name, err)
	}
	return nil
}

// running reports whether the process is alive.
func (s *server) running() bool {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// alarm returns the first log line that reveals a defect, if any.
func (s *server) alarm() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.alarms) == 0 {
		return ""
	}
	return s.alarms[0]
}

func (s *server) counts() (errs, repairs, starts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errors, s.repairs, s.starts
}

func slaveArgs(masterPort int) []string {
	return []string{"-role", "slave", "-host", "127.0.0.1", "-port", strconv.Itoa(masterPort), "-event", "0"}
}

//go:build unix

package testserver

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Redis is a redis-server process on a loopback port, without persistence.
type Redis struct {
	t      testing.TB
	Addr   string
	port   int
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

// StartRedis starts redis-server. When it is not installed the test fails
// if the environment has CI=true (CI installs it) and is skipped otherwise.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is required in CI: %v", err)
		}
		t.Skipf("redis-server not installed: %v", err)
	}
	r := &Redis{t: t, port: FreePort(t)}
	r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
	r.Start()
	return r
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start (re)starts the server on its port; its data starts empty.
func (r *Redis) Start() {
	t := r.t
	t.Helper()
	r.out = &syncBuffer{}
	r.exited = make(chan struct{})
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd, exited := r.cmd, r.exited
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		kill(cmd, exited)
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := r.ping(); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("redis-server not ready within 20 s: %v\n%s", err, r.out.String())
		}
		select {
		case <-exited:
			t.Fatalf("redis-server exited during start-up:\n%s", r.out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (r *Redis) ping() error {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	var b [7]byte
	n, err := c.Read(b[:])
	if err != nil {
		return err
	}
	if string(b[:n]) != "+PONG\r\n" {
		return fmt.Errorf("unexpected reply %q", b[:n])
	}
	return nil
}

// Kill stops the server with SIGKILL (all keys are lost).
func (r *Redis) Kill() { kill(r.cmd, r.exited) }

// Pause freezes the server (SIGSTOP): connections stay open but nothing is
// answered, as in a network partition. Resume undoes it; keys survive.
func (r *Redis) Pause() { r.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (r *Redis) Resume() { r.cmd.Process.Signal(syscall.SIGCONT) }

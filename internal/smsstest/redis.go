//go:build unix

package smsstest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Redis is a redis-server process on a loopback port, without persistence.
type Redis struct {
	t    testing.TB
	Addr string
	port int
	proc *Proc
}

// StartRedis starts redis-server, ended in t.Cleanup. When it is not
// installed the test fails if the environment has CI=true (CI installs it)
// and is skipped otherwise.
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

// Start (re)starts the server on its port; its data starts empty.
func (r *Redis) Start() {
	t := r.t
	t.Helper()
	r.proc = StartProc(t, exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir()), nil)
	err := errors.New("not polled")
	up := Poll(20*time.Second, func() bool {
		select {
		case <-r.proc.Exited():
			return true
		default:
		}
		err = r.ping()
		return err == nil
	})
	if !up {
		t.Fatalf("redis-server not ready within 20 s: %v\n%s", err, r.proc.Out.String())
	}
	if err != nil {
		t.Fatalf("redis-server exited during start-up:\n%s", r.proc.Out.String())
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
func (r *Redis) Kill() { r.proc.Kill() }

// Pause freezes the server (SIGSTOP): connections stay open but nothing is
// answered, as in a network partition. Resume undoes it; keys survive.
func (r *Redis) Pause() { r.proc.Stop() }

// Resume continues a paused server.
func (r *Redis) Resume() { r.proc.Cont() }

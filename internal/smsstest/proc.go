//go:build unix

package smsstest

import (
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// StartTimeout is how long StartProc waits for a process's ready line.
const StartTimeout = 30 * time.Second

// StopGrace is how long the cleanup of a process waits after SIGTERM
// before it sends SIGKILL.
const StopGrace = 5 * time.Second

// Proc is a running subprocess whose output the test can read.
type Proc struct {
	Cmd *exec.Cmd
	// Out collects the process's stdout and stderr, unless the command
	// came with writers of its own.
	Out *SyncBuffer
	// Addr is the first submatch of the ready pattern (the listen address
	// for ListenRe), or "" if the pattern had none.
	Addr string

	t      testing.TB
	exited chan struct{}
	err    error // Cmd.Wait's result, set before exited is closed
}

// StartProc starts cmd and, when ready is not nil, waits until the
// process's output matches it. Output goes to the returned Proc's Out
// (stdout and stderr that cmd leaves nil). The test fails if the process
// exits first or StartTimeout passes (a stuck process is sent SIGQUIT, so a
// Go program's goroutine dump shows where it hangs). In t.Cleanup a process
// still running is continued (in case it was stopped), sent SIGTERM, and
// killed if it has not exited after StopGrace.
func StartProc(t testing.TB, cmd *exec.Cmd, ready *regexp.Regexp) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Out: &SyncBuffer{}, t: t, exited: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = p.Out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = p.Out
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.cleanup)
	if ready == nil {
		return p
	}
	deadline := time.After(StartTimeout)
	for {
		if m := ready.FindStringSubmatch(p.Out.String()); m != nil {
			if len(m) > 1 {
				p.Addr = m[1]
			}
			return p
		}
		select {
		case <-p.exited:
			if m := ready.FindStringSubmatch(p.Out.String()); m != nil && len(m) > 1 {
				p.Addr = m[1] // it was ready, then exited: the caller decides
				return p
			}
			t.Fatalf("%s exited during start-up: %v\n%s", cmd.Path, p.err, p.Out.String())
		case <-deadline:
			t.Fatalf("%s not ready (%s) within %v:\n%s", cmd.Path, ready, StartTimeout, p.Stacks())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (p *Proc) cleanup() {
	if p.exitedNow() {
		return
	}
	p.Cmd.Process.Signal(syscall.SIGCONT)
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(StopGrace):
		p.Kill()
	}
}

func (p *Proc) exitedNow() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit status as Cmd.Wait returned it; it is nil
// until Exited is closed.
func (p *Proc) Err() error {
	if !p.exitedNow() {
		return nil
	}
	return p.err
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Signal sends sig to the process (an exited process ignores it).
func (p *Proc) Signal(sig os.Signal) { p.Cmd.Process.Signal(sig) }

// Kill ends the process with SIGKILL and waits until it has exited.
func (p *Proc) Kill() {
	if p.exitedNow() {
		return
	}
	p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Term sends SIGTERM and waits for the process to exit, failing the test
// if it does not within StartTimeout or exits with an error.
func (p *Proc) Term() {
	p.t.Helper()
	p.Cmd.Process.Signal(syscall.SIGTERM)
	if err := p.Wait(StartTimeout); err != nil {
		p.t.Fatalf("%s exit after SIGTERM: %v\n%s", p.Cmd.Path, err, p.Out.String())
	}
}

// Stop freezes the process with SIGSTOP: its connections stay open and
// nothing is answered, as when its host hangs. Cont undoes it.
func (p *Proc) Stop() { p.Cmd.Process.Signal(syscall.SIGSTOP) }

// Cont continues a process frozen by Stop.
func (p *Proc) Cont() { p.Cmd.Process.Signal(syscall.SIGCONT) }

// Wait waits up to d for the process to exit and returns its exit status;
// the test fails, with the process's goroutine dump, if it does not exit.
func (p *Proc) Wait(d time.Duration) error {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(d):
		p.t.Fatalf("%s did not exit within %v:\n%s", p.Cmd.Path, d, p.Stacks())
		return nil
	}
}

// Stacks ends a stuck process with SIGQUIT, whose goroutine dump (for a Go
// program) shows where it hangs, and returns its output.
func (p *Proc) Stacks() string {
	p.Cmd.Process.Signal(syscall.SIGCONT)
	p.Cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
	}
	return p.Out.String()
}

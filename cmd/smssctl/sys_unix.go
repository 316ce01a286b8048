//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}

// promptPassword reads one line from the terminal f with echo off.
func promptPassword(f *os.File, w io.Writer, prompt string) (string, error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return "", fmt.Errorf("terminal: %w", err)
	}
	noEcho := *old
	noEcho.Lflag &^= unix.ECHO
	noEcho.Lflag |= unix.ICANON | unix.ISIG
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &noEcho); err != nil {
		return "", fmt.Errorf("terminal: %w", err)
	}
	defer unix.IoctlSetTermios(fd, ioctlSetTermios, old)
	fmt.Fprint(w, prompt)
	line, err := bufio.NewReader(f).ReadString('\n')
	fmt.Fprintln(w)
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("read password: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// ttyPassword asks for a password on the controlling terminal (not stdin,
// which may carry a message body); ok is false without a terminal.
func ttyPassword(w io.Writer, prompt string) (pw string, ok bool, err error) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return "", false, nil
	}
	defer tty.Close()
	if !isTerminal(tty) {
		return "", false, nil
	}
	pw, err = promptPassword(tty, tty, prompt)
	return pw, true, err
}

// lockUsersFile serialises edits of the users file between smssctl runs
// with an exclusive flock on PATH.lock.
func lockUsersFile(path string) (unlock func(), err error) {
	lf, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock users file: %w", err)
	}
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		lf.Close()
		return nil, fmt.Errorf("lock %s: %w", lf.Name(), err)
	}
	return func() {
		unix.Flock(int(lf.Fd()), unix.LOCK_UN)
		lf.Close()
	}, nil
}

// cbreak makes terminal f pass single key presses without echo (for top's
// "q"); restore puts the previous mode back. ok is false when f is not a
// terminal, which is then read as it comes.
func cbreak(f *os.File) (restore func(), ok bool) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return func() {}, false
	}
	raw := *old
	raw.Lflag &^= unix.ICANON | unix.ECHO
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &raw); err != nil {
		return func() {}, false
	}
	return func() { unix.IoctlSetTermios(fd, ioctlSetTermios, old) }, true
}

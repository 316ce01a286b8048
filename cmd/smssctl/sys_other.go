//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

import (
	"errors"
	"io"
	"os"
)

func isTerminal(*os.File) bool { return false }

func promptPassword(*os.File, io.Writer, string) (string, error) {
	return "", errors.New("no password prompt on this platform")
}

func ttyPassword(io.Writer, string) (string, bool, error) { return "", false, nil }

// lockUsersFile does not lock here: edit the users file from one place at
// a time.
func lockUsersFile(string) (func(), error) { return func() {}, nil }

func cbreak(*os.File) (func(), bool) { return func() {}, false }

//go:build !linux

package server

import "errors"

// The epoll front-end is Linux only (epoll_linux.go): elsewhere
// Options.Epoll is not used, logged at Info (startEpollLocked), and these
// stand-ins only let the shared code compile.
type epollLoop struct{}

// epollSupported: no epoll here (startEpollLocked logs that at Info).
const epollSupported = false

type epConn struct{}

// newEpollLoop is not reached here: startEpollLocked stops at
// epollSupported.
func newEpollLoop(*Server) (*epollLoop, error) {
	return nil, errors.New("the epoll front-end is Linux only")
}

func (*epollLoop) adopt(*conn) bool { return false }
func (*epollLoop) stop()            {}
func (*epollLoop) run()             {}

//go:build unix

package smsstest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Ports for servers a test starts are handed out so that nothing else can
// take one between the moment it is chosen and the moment the server binds
// it, which asking the kernel for a free port (":0") does not ensure: that
// port comes from the ephemeral range, from which the kernel also picks the
// local port of every outgoing connection — and go test runs the packages'
// test binaries at once, each dialling hundreds of connections. CI failed
// that way ("listen tcp 127.0.0.1:35337: bind: address already in use").
//
// So a port comes from outside the ephemeral range (no outgoing connection
// is ever given one), and is reserved across processes by an flock on a
// file named after it in a shared directory: test binaries running at once
// never hand out the same port. The lock is held until the process exits;
// a port is never handed out twice by one process.
var ports struct {
	mu   sync.Mutex
	held map[int]*os.File // port → its locked file, open until exit
	next int              // the port to try next; 0: not chosen yet
}

// portRangeFile is where Linux says which ports are ephemeral.
const portRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// reservablePorts is the range [lo, hi] ports are handed out from: the
// widest stretch between 10000 and 65535 outside the ephemeral range (by
// portRangeFile; elsewhere the IANA range 49152–65535 every BSD uses).
func reservablePorts() (lo, hi int) {
	ephLo, ephHi := 49152, 65535
	if b, err := os.ReadFile(portRangeFile); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && l <= h {
				ephLo, ephHi = l, h
			}
		}
	}
	below, above := ephLo-1-10000, 65535-(ephHi+1)
	if below >= above {
		return 10000, ephLo - 1
	}
	return ephHi + 1, 65535
}

// FreePort returns a loopback TCP port reserved for this test process: free
// when returned, outside the range the kernel takes local ports of
// outgoing connections from, and handed to no other process of this
// kit's users while this one runs. It fails the test when no port of the
// range can be reserved.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := reservePort()
	if err != nil {
		t.Fatal(fmt.Errorf("free port: %w", err))
	}
	return p
}

func reservePort() (int, error) {
	lo, hi := reservablePorts()
	if hi-lo < 100 {
		return listenAny() // no room outside the ephemeral range
	}
	dir := filepath.Join(os.TempDir(), "smsstest-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, fmt.Errorf("port lock directory: %w", err)
	}
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.held == nil {
		ports.held = map[int]*os.File{}
	}
	if ports.next < lo || ports.next > hi {
		// Processes start at different places so they rarely meet a
		// port another one holds.
		ports.next = lo + rand.IntN(hi-lo+1)
	}
	for range hi - lo + 1 {
		p := ports.next
		ports.next++
		if ports.next > hi {
			ports.next = lo
		}
		if ports.held[p] != nil {
			continue
		}
		f, err := lockPortFile(filepath.Join(dir, strconv.Itoa(p)))
		if err != nil {
			if errors.Is(err, errPortLocked) {
				continue
			}
			return 0, err
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			f.Close() // something not using this kit listens there
			continue
		}
		l.Close()
		ports.held[p] = f
		return p, nil
	}
	return 0, fmt.Errorf("every port of %d..%d is taken or reserved by another test process", lo, hi)
}

var errPortLocked = errors.New("port reserved by another process")

// lockPortFile opens and locks name without waiting; errPortLocked when
// another process holds it.
func lockPortFile(name string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("port lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errPortLocked
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return f, nil
}

// listenAny is the fallback where no range outside the ephemeral one is
// wide enough: a port the kernel says is free now.
func listenAny() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Command replreader is a bare replica reader for the bridge's cost
// benchmark (e2e/bridge TestBridgeMasterCost): it asks the master for its last
// eventId (status), sends a replica request from there and reads and
// discards the stream, sending nothing back. What the master does for it
// is what it does for any replica reader, without the reader's own work
// (a slave's storing, the bridge's publishing).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/protocol"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "master host:port")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "replreader:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, addr, client.Options{})
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	st, err := cl.Status(ctx)
	cl.Close()
	if err != nil {
		return fmt.Errorf("status of %s: %w", addr, err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	req, err := protocol.AppendReplica(nil, st.LastEventID)
	if err != nil {
		return err
	}
	if _, err := c.Write(req); err != nil {
		return err
	}
	fmt.Println("following after", st.LastEventID)
	r := bufio.NewReaderSize(c, 256<<10)
	for {
		f, err := protocol.ReadReplicaFrame(r, 64<<20)
		if err != nil {
			return fmt.Errorf("replica stream: %w", err)
		}
		if f.Code != protocol.StatusOK && f.Code != protocol.StatusAlive {
			return fmt.Errorf("replica stream: frame %d", f.Code)
		}
	}
}

// Command kfakeproc runs franz-go's kfake (an in-process Kafka cluster) as
// a process of its own, for the bridge's end-to-end tests: a Kafka target
// the test can SIGKILL, SIGSTOP and restart like a real broker. With
// -data-dir, kfake writes every produced batch to its segment files before
// it answers, and reloads them (and the topics) on the next start.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 0, "listen port on 127.0.0.1 (0: any)")
	dir := flag.String("data-dir", "", "persistence directory (empty: in memory only)")
	sync := flag.Bool("sync", false, "fsync every produced batch")
	flag.Parse()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(*port)}
	if *dir != "" {
		opts = append(opts, kfake.DataDir(*dir))
	}
	if *sync {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfakeproc:", err)
		os.Exit(1)
	}
	// The test waits for this line.
	fmt.Println("kfake listening", c.ListenAddrs()[0])
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	c.Close()
}

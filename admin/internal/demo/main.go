// Command demo serves the admin dashboard over simulated traffic, for
// screenshots and for working on the dashboard without a real server:
//
//	go run ./admin/internal/demo -listen 127.0.0.1:12380
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/smssmq/smss/admin"
	"github.com/smssmq/smss/admin/internal/sim"
	"github.com/smssmq/smss/metrics"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:12380", "admin listen address")
	token := flag.String("token", "", "admin token (empty: no protection)")
	slave := flag.Bool("slave", false, "simulate a slave")
	flag.Parse()
	if err := run(*listen, *token, *slave); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(listen, token string, slave bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	role := metrics.RoleMaster
	if slave {
		role = metrics.RoleSlave
	}
	s := sim.New(role)
	go s.Run(ctx, 250*time.Millisecond)
	srv, err := admin.New(admin.Options{Listen: listen, Token: token, Metrics: s.Metrics, Source: s.Source,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	fmt.Printf("dashboard on http://%s/\n", srv.Addr())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// Command tlsauth connects to a server's TLS port as a user, publishes one
// message, and shows how refusals are told apart. The password comes from
// $SMSS_PASSWORD (never from the command line).
//
//	SMSS_PASSWORD=... go run ./examples/tlsauth -addr 127.0.0.1:12302 -ca ca.pem \
//	    -server-name mq.example.com -user billing -topic order
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:12302", "the server's TLS listener (tls.listen)")
	ca := flag.String("ca", "ca.pem", "CA that signed the server's certificate")
	serverName := flag.String("server-name", "", "name in the server's certificate (default: the -addr host)")
	cert := flag.String("cert", "", "client certificate, for servers with tls.clientCA")
	key := flag.String("key", "", "key of -cert")
	user := flag.String("user", "billing", "user to log in as")
	topic := flag.String("topic", "order", "topic the user may publish to")
	other := flag.String("forbidden", "payroll", "a topic the user may not publish to")
	create := flag.Bool("create", false, "create -topic first (needs the manage grant on it)")
	flag.Parse()

	tlsConf, err := auth.ClientTLSConfig(*ca, *serverName, *cert, *key)
	if err != nil {
		log.Fatalf("TLS config: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Subscribers made with c.NewSubscriber, replica streams and dlock
	// groups inherit TLS and the credentials.
	c, err := client.Dial(ctx, *addr, client.Options{
		TLS:         tlsConf,
		Credentials: &client.Credentials{User: *user, Password: os.Getenv("SMSS_PASSWORD")},
	})
	if errors.Is(err, client.ErrAuthFailed) {
		log.Fatalf("login refused (wrong or missing password, user disabled, or locked out): %v", err)
	} else if err != nil {
		log.Fatalf("connect: %v", err)
	}
	defer c.Close()

	if *create {
		if err := c.CreateTopic(ctx, *topic); err != nil && !errors.Is(err, client.ErrTopicExist) {
			log.Fatalf("create %s: %v", *topic, err)
		}
	}
	if err := c.Publish(ctx, *topic, client.NewMessage([]byte("hi over TLS"))); err != nil {
		log.Fatalf("publish to %s: %v", *topic, err)
	}
	fmt.Printf("published to %s as %s\n", *topic, *user)

	err = c.Publish(ctx, *other, client.NewMessage([]byte("not allowed")))
	switch {
	case errors.Is(err, client.ErrPermissionDenied):
		// The text names the missing grant.
		fmt.Printf("refused as expected: %v\n", err)
	case err != nil:
		log.Fatalf("publish to %s: %v", *other, err)
	default:
		log.Fatalf("publish to %s was allowed: grant %s less", *other, *user)
	}
}

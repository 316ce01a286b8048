package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/internal/smsstest"
)

// queueInfoJSON runs queue info --json and decodes it.
func queueInfoJSON(t *testing.T, addr, topic, group string) client.QueueInfo {
	t.Helper()
	r := ctl(t, addr, "", "queue", "info", topic, group, "--json")
	r.expect(t, 0)
	var qi client.QueueInfo
	if err := json.Unmarshal([]byte(r.stdout), &qi); err != nil {
		t.Fatalf("queue info --json: %v\n%s", err, r.stdout)
	}
	return qi
}

func TestQueueCommands(t *testing.T) {
	addr := startServer(t)
	ctl(t, addr, "", "topic", "create", "jobs").expect(t, 0)
	create := []string{"queue", "create", "jobs", "g", "--from", "oldest", "--ack-wait", "5s", "--max-deliver", "3",
		"--backoff", "10ms,20ms", "--dead-letter", "jobs.dead", "--max-in-flight", "10"}
	ctl(t, addr, "", create...).expect(t, 0, "queue group g on jobs: ack wait 5s, max deliver 3, backoff 10ms,20ms, dead letters to jobs.dead, max in flight 10 per consumer")
	ctl(t, addr, "", create...).expect(t, 0) // the same settings again
	if r := ctl(t, addr, "", "queue", "create", "jobs", "g", "--ack-wait", "9s"); r.code != 1 || !strings.Contains(r.stderr, "other settings") {
		t.Errorf("create with other settings: exit %d, %s", r.code, r.stderr)
	}
	ctl(t, addr, "", "queue", "list").expect(t, 0, "TOPIC", "jobs  ", "g  ")
	var list []client.QueueInfo
	r := ctl(t, addr, "", "queue", "list", "jobs", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].Config.DeadLetter != "jobs.dead" {
		t.Errorf("queue list --json: %v %s", err, r.stdout)
	}
	ctl(t, addr, "", "queue", "list", "nosuch").expect(t, 0, "no queue groups")
	if r := ctl(t, addr, "", "queue", "info", "jobs", "nosuch"); r.code != 1 || !strings.Contains(r.stderr, "no queue group nosuch on topic jobs") {
		t.Errorf("info of a missing group: exit %d, %s", r.code, r.stderr)
	}

	for _, body := range []string{"one", "two", "three"} {
		ctl(t, addr, "", "pub", "jobs", body).expect(t, 0)
	}
	ctl(t, addr, "", "queue", "info", "jobs", "g").expect(t, 0, "pending:", "3", "consumers:")
	r = ctl(t, addr, "", "work", "jobs", "g", "--count", "3")
	r.expect(t, 0, "attempt 1\t", "\tone\n", "\ttwo\n", "\tthree\n")
	if !strings.Contains(r.stderr, "3 messages acked, 3 confirmed by the server") {
		t.Errorf("work summary: %s", r.stderr)
	}
	if qi := queueInfoJSON(t, addr, "jobs", "g"); qi.Acked != 3 || qi.Pending != 0 {
		t.Errorf("after work: acked %d, pending %d", qi.Acked, qi.Pending)
	}

	// --exec: the body on stdin, the message in the environment; exit 0
	// acks, another status naks (and the message comes back, attempt 2).
	ctl(t, addr, "", "pub", "jobs", "bad").expect(t, 0)
	ctl(t, addr, "", "pub", "jobs", "good").expect(t, 0)
	script := `read b; echo "ran $SMSS_TOPIC $SMSS_GROUP $SMSS_ATTEMPT $b $SMSS_CONSUMER"; ` +
		`[ "$b" != bad ] || [ "$SMSS_ATTEMPT" -ge 2 ]`
	r = ctl(t, addr, "", "work", "jobs", "g", "--consumer", "sh1", "--count", "2", "--exec", script)
	r.expect(t, 0, "ran jobs g 1 bad sh1\n", "ran jobs g 2 bad sh1\n", "ran jobs g 1 good sh1\n")
	if !strings.Contains(r.stderr, "; nak") || !strings.Contains(r.stderr, "2 messages acked, 2 confirmed") {
		t.Errorf("work --exec stderr: %s", r.stderr)
	}
	if qi := queueInfoJSON(t, addr, "jobs", "g"); qi.Acked != 5 || qi.Redelivered != 1 || qi.Pending != 0 {
		t.Errorf("after work --exec: %+v", qi)
	}

	// --json prints one object per message.
	ctl(t, addr, "", "pub", "jobs", "--header", "k=v", "j").expect(t, 0)
	r = ctl(t, addr, "", "work", "jobs", "g", "--count", "1", "--json")
	var m struct {
		EventID int64
		Attempt int
		Topic   string
		Group   string
		Headers []client.Header
		Body    string
	}
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || m.Attempt != 1 || m.Topic != "jobs" || m.Group != "g" ||
		m.Body != "j" || len(m.Headers) == 0 || m.Headers[0] != (client.Header{Key: "k", Value: "v"}) {
		t.Errorf("work --json: %v %s", err, r.stdout)
	}

	ctl(t, addr, "", "queue", "delete", "jobs", "g").expect(t, 0, "deleted queue group g of jobs")
	ctl(t, addr, "", "queue", "list").expect(t, 0, "no queue groups")
}

// A work whose group is deleted under it ends with exit code 3.
func TestWorkEndsWhenGroupDeleted(t *testing.T) {
	addr := startServer(t)
	ctl(t, addr, "", "topic", "create", "jobs").expect(t, 0)
	ctl(t, addr, "", "queue", "create", "jobs", "g").expect(t, 0)
	cmd := exec.Command(ctlBin, "work", "jobs", "g", "--consumer", "w1")
	cmd.Env = append(os.Environ(), "SMSS_ADDR="+addr)
	var outb, errb smsstest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &outb, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	if !smsstest.Poll(20*time.Second, func() bool {
		r := ctl(t, addr, "", "queue", "info", "jobs", "g")
		return strings.Contains(r.stdout, "w1")
	}) {
		t.Fatalf("the worker did not join:\n%s", errb.String())
	}
	ctl(t, addr, "", "queue", "delete", "jobs", "g").expect(t, 0)
	select {
	case <-done:
		if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(errb.String(), "queue group g of topic jobs was deleted") {
			t.Errorf("exit %d, stderr %s", code, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("work did not end after its group was deleted:\n%s", errb.String())
	}
}

// TestQueueRedrive: dead letters go back to the topic they came from,
// without the smss-dead-* headers, once: a second redrive finds nothing.
func TestQueueRedrive(t *testing.T) {
	addr := startServer(t)
	ctl(t, addr, "", "topic", "create", "jobs").expect(t, 0)
	ctl(t, addr, "", "queue", "create", "jobs", "g", "--from", "oldest", "--max-deliver", "1", "--dead-letter", "jobs.dead").expect(t, 0)
	ctl(t, addr, "", "pub", "jobs", "bad-1", "--header", "k=v").expect(t, 0)
	ctl(t, addr, "", "pub", "jobs", "bad-2").expect(t, 0)
	// One delivery each, nak'd by a worker running until killed: with max
	// deliver 1 each is dead-lettered at once.
	cmd := exec.Command(ctlBin, "work", "jobs", "g", "--exec", "exit 3")
	cmd.Env = append(os.Environ(), "SMSS_ADDR="+addr)
	var errb smsstest.SyncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if !smsstest.Poll(30*time.Second, func() bool { return queueInfoJSON(t, addr, "jobs", "g").DeadLettered == 2 }) {
		t.Fatalf("no two dead letters:\n%s", errb.String())
	}
	cmd.Process.Kill()
	cmd.Wait()
	ctl(t, addr, "", "queue", "redrive", "jobs.dead").expect(t, 0, "-> jobs", "redrove 2 dead letter(s) from jobs.dead")
	ctl(t, addr, "", "queue", "redrive", "jobs.dead").expect(t, 0, "redrove 0 dead letter(s)")
	// Back in jobs: the group delivers them again (max deliver counts anew).
	smsstest.WaitFor(t, 30*time.Second, "the redriven letters in the group", func() bool {
		return queueInfoJSON(t, addr, "jobs", "g").Pending == 2
	})
	out := ctl(t, addr, "", "work", "jobs", "g", "--count", "2")
	out.expect(t, 0, "\tbad-1\n", "\tbad-2\n")
	if strings.Contains(out.stdout, "smss-dead-") {
		t.Errorf("redriven letters kept the dead-letter headers:\n%s", out.stdout)
	}
}

package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestAuthRequestsRoundTrip(t *testing.T) {
	start := must(AppendAuthStart(nil, MechSCRAMSHA256, []byte("n,,n=alice,r=abc")))
	cont := must(AppendAuthContinue(nil, []byte("c=biws,r=abcdef,p=AAAA")))
	// Followed by an alive, which must be read intact: the bodies are
	// consumed exactly.
	stream := append(append(append([]byte(nil), start...), cont...), must(AppendAlive(nil, nil))...)
	rr := NewRequestReader(bytes.NewReader(stream), Limits{})
	var req Request
	for i, want := range []struct {
		cmd           Command
		topic, body   string
		headerPayload uint32
	}{
		{CmdAuthStart, MechSCRAMSHA256, "n,,n=alice,r=abc", 16},
		{CmdAuthContinue, "", "c=biws,r=abcdef,p=AAAA", 22},
		{CmdAlive, "", "", 0},
	} {
		if err := rr.Read(&req); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if req.Header.Cmd != want.cmd || string(req.Topic) != want.topic || string(req.Payload) != want.body ||
			req.Header.PayloadSize() != want.headerPayload {
			t.Fatalf("request %d: %v %q %q", i, req.Header.Cmd, req.Topic, req.Payload)
		}
	}
	if CmdAuthStart.String() != "authStart" || !CmdAuthContinue.Acceptable() {
		t.Fatal("command names")
	}
}

func TestAuthRequestOverCapClosesUnread(t *testing.T) {
	req := must(AppendAuthStart(nil, MechSCRAMSHA256, []byte("x")))
	copy(req[3:7], []byte{0x01, 0x10, 0, 0}) // 4097
	err := NewRequestReader(bytes.NewReader(req), Limits{}).Read(new(Request))
	var re *RequestError
	if !errors.As(err, &re) || !re.Close || !errors.Is(err, ErrAuthTooLong) {
		t.Fatalf("over-cap auth body: %v", err)
	}
	if _, err := AppendAuthContinue(nil, make([]byte, MaxAuthMessage+1)); !errors.Is(err, ErrFieldTooLong) {
		t.Fatalf("encoder accepted an over-cap message: %v", err)
	}
}

// TestWriteAuthFuzzSeeds keeps the committed FuzzReadRequest seeds of the
// handshake requests in step with the encoder.
func TestWriteAuthFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzReadRequest")
	for name, data := range map[string][]byte{
		"auth-start":    must(AppendAuthStart(nil, MechSCRAMSHA256, []byte("n,,n=alice,r=abc"))),
		"auth-continue": append(must(AppendAuthContinue(nil, []byte("c=biws,r=abc,p=AAAA"))), must(AppendAlive(nil, nil))...),
	} {
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("seed %s is missing or stale; expected content:\n%s", name, want)
		}
	}
}

package main

import (
	"bufio"
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestAppendCommand(t *testing.T) {
	got := string(appendCommand(nil, []byte("XADD"), []byte("k"), []byte("*"), []byte("d"), []byte("")))
	want := "*5\r\n$4\r\nXADD\r\n$1\r\nk\r\n$1\r\n*\r\n$1\r\nd\r\n$0\r\n\r\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func fakeConn(reply string) *redisConn {
	return &redisConn{r: bufio.NewReader(strings.NewReader(reply))}
}

func TestSkipReplies(t *testing.T) {
	tests := []struct {
		name  string
		reply string
		err   string
	}{
		{"simple", "+OK\r\n", ""},
		{"integer", ":12\r\n", ""},
		{"bulk", "$5\r\nhello\r\n", ""},
		{"nil bulk", "$-1\r\n", ""},
		{"nested array", "*2\r\n*1\r\n:1\r\n$2\r\nab\r\n", ""},
		{"nil array", "*-1\r\n", ""},
		{"error", "-ERR wrong\r\n", "ERR wrong"},
		{"bad type", "?x\r\n", "reply type"},
		{"bad length", "$abc\r\n", "bad length"},
		{"truncated", "$5\r\nhel", "EOF"},
		{"no CR", "+OK\n", "bad line"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.reply
			if tc.err == "" {
				in += "+NEXT\r\n"
			}
			c := fakeConn(in)
			err := c.skip()
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				// The reply was consumed exactly.
				if typ, rest, err := c.header(); err != nil || typ != '+' || string(rest) != "NEXT" {
					t.Fatalf("next reply %q %q %v", typ, rest, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
		})
	}
	if err := fakeConn("-ERR x\r\n").skip(); !isRedisError(err) {
		t.Fatalf("%v is not a redisError", err)
	}
}

func TestReadXReadReply(t *testing.T) {
	entry := func(id, body string) string {
		return "*2\r\n$" + strconv.Itoa(len(id)) + "\r\n" + id + "\r\n*2\r\n$1\r\nd\r\n$" + strconv.Itoa(len(body)) + "\r\n" + body + "\r\n"
	}
	reply := "*1\r\n*2\r\n$3\r\nkey\r\n*3\r\n" + entry("1-0", "aaaaaaaa1") + entry("1-1", "bbbbbbbb2") + entry("2-0", "cccccccc3")
	s := fakeConn(reply)
	var bodies, ids []string
	n, err := s.readStreams(func(id, b []byte) { ids, bodies = append(ids, string(id)), append(bodies, string(b)) })
	if err != nil || n != 3 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	// Each id goes with its own body although the fields reuse the buffer.
	if strings.Join(bodies, ",") != "aaaaaaaa1,bbbbbbbb2,cccccccc3" || strings.Join(ids, ",") != "1-0,1-1,2-0" {
		t.Fatalf("bodies %v ids %v", bodies, ids)
	}

	// A BLOCK timeout (or an XREADGROUP with nothing new) is a nil array.
	if n, err := fakeConn("*-1\r\n").readStreams(func(_, _ []byte) { t.Fatal("no message expected") }); n != 0 || err != nil {
		t.Fatalf("nil reply: %d %v", n, err)
	}

	// Extra fields are skipped; only "d" is a body.
	odd := "*1\r\n*2\r\n$1\r\nk\r\n*1\r\n*2\r\n$3\r\n9-9\r\n*4\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\nd\r\n$8\r\n12345678\r\n"
	s = fakeConn(odd)
	bodies = nil
	if n, err := s.readStreams(func(_, b []byte) { bodies = append(bodies, string(b)) }); n != 1 || err != nil || len(bodies) != 1 || bodies[0] != "12345678" {
		t.Fatalf("extra fields: %d %v %v", n, err, bodies)
	}

	// A malformed shape is an error, not a panic.
	s = fakeConn("*1\r\n*3\r\n")
	if _, err := s.readStreams(func(_, _ []byte) {}); !errors.Is(err, errProtocol) {
		t.Fatalf("bad shape: %v", err)
	}
}

// The RESP reader must reject, never panic on, whatever a server sends.
func FuzzRESP(f *testing.F) {
	f.Add([]byte("*1\r\n*2\r\n$3\r\nkey\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nd\r\n$8\r\n12345678\r\n"))
	f.Add([]byte("*-1\r\n"))
	f.Add([]byte("$5\r\nhello\r\n"))
	f.Add([]byte("-ERR x\r\n"))
	f.Add([]byte("*2\r\n:1\r\n+OK\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &redisConn{r: bufio.NewReader(strings.NewReader(string(in)))}
		_ = c.skip()
		s := &redisConn{r: bufio.NewReader(strings.NewReader(string(in)))}
		_, _ = s.readStreams(func(_, _ []byte) {})
	})
}

package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestAppendReplyErrorTruncates(t *testing.T) {
	long := strings.Repeat("e", MaxErrorText+10)
	out := AppendReplyError(nil, long)
	var h RespHeader
	copy(h[:], out)
	if h.Code() != StatusError || h.ErrLen() != MaxErrorText || len(out) != RespHeaderSize+MaxErrorText {
		t.Fatalf("code %d len %d total %d", h.Code(), h.ErrLen(), len(out))
	}
	_, err := ReadReply(bytes.NewReader(out), ReplyPlain, 0)
	if err == nil || err.Error() != long[:MaxErrorText] {
		t.Fatalf("read back %d bytes of text", len(err.Error()))
	}
}

func TestReadReply(t *testing.T) {
	jsonBody := []byte(`[{"name":"a"}]`)
	withJSON, _ := AppendReplyJSON(nil, jsonBody)
	emptyJSON, _ := AppendReplyJSON(nil, nil)
	tests := []struct {
		name     string
		in       []byte
		kind     ReplyKind
		max      int
		wantBody string
		wantErr  string // text of the error, "" for none
		biz      bool
	}{
		{"ok", AppendReplyOK(nil), ReplyPlain, 0, "", "", false},
		{"alive", AppendReplyAlive(nil), ReplyPlain, 0, "", "", false},
		{"error", AppendReplyError(nil, "topic exist"), ReplyPlain, 0, "", "topic exist", true},
		{"empty error", AppendReplyError(nil, ""), ReplyPlain, 0, "", "unknown err", true},
		{"json", withJSON, ReplyJSON, 100, string(jsonBody), "", false},
		{"json empty", emptyJSON, ReplyJSON, 100, "", "", false},
		{"json error", AppendReplyError(nil, "topic not exist"), ReplyJSON, 100, "", "topic not exist", true},
		{"alive where json expected", AppendReplyAlive(nil), ReplyJSON, 100, "", "unexpected response status 201", false},
		{"sub end on plain", AppendReplySubEnd(nil), ReplyPlain, 0, "", "unexpected response status 255", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := ReadReply(bytes.NewReader(tt.in), tt.kind, tt.max)
			if tt.wantErr == "" {
				if err != nil || string(body) != tt.wantBody {
					t.Fatalf("%q, %v", body, err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr || IsBizError(err) != tt.biz {
				t.Fatalf("err %v (biz %v), want %q (biz %v)", err, IsBizError(err), tt.wantErr, tt.biz)
			}
		})
	}
}

func TestReadersCapLengths(t *testing.T) {
	var h RespHeader
	binary.LittleEndian.PutUint16(h[:], StatusOK)
	binary.LittleEndian.PutUint32(h[2:], 0xFFFFFFFF)
	if _, err := ReadReply(bytes.NewReader(h[:]), ReplyJSON, 1<<20); !errors.Is(err, ErrReplyTooLarge) {
		t.Fatalf("json: %v", err)
	}
	frame := AppendSubFrameHeader(nil, 1, 0xFFFFFFF0)
	if _, err := ReadSubFrame(bytes.NewReader(frame), 1<<20); !errors.Is(err, ErrReplyTooLarge) {
		t.Fatalf("sub frame: %v", err)
	}
	rep := append(AppendReplyOK(nil), 0xff, 0xff, 0xff, 0x7f)
	if _, err := ReadReplicaFrame(bytes.NewReader(rep), 1<<20); !errors.Is(err, ErrReplyTooLarge) {
		t.Fatalf("replica: %v", err)
	}
	// Truncated bodies are I/O errors, not business errors.
	short := AppendReplyError(nil, "topic exist")[:12]
	if _, err := ReadReply(bytes.NewReader(short), ReplyPlain, 0); !errors.Is(err, io.ErrUnexpectedEOF) || IsBizError(err) {
		t.Fatalf("truncated error text: %v", err)
	}
}

func TestReadSubFrame(t *testing.T) {
	var area []byte
	area = AppendSubMessage(area, 1, 2, 0, 75, goldenRecord(t))
	area = AppendSubMessage(area, 1, 3, 1, 0, rec(3))
	var stream []byte
	stream = AppendSubFrameHeader(stream, 2, uint32(len(area)))
	stream = append(stream, area...)
	stream = AppendReplyAlive(stream)
	stream = AppendReplySubEnd(stream)
	stream = AppendReplyError(stream, "EOF")
	r := bytes.NewReader(stream)

	f, err := ReadSubFrame(r, 1<<20)
	if err != nil || f.Code != StatusOK || f.Count != 2 {
		t.Fatalf("data frame: %+v %v", f, err)
	}
	msgs, err := ParseSubMessages(f.Body, f.Count)
	if err != nil {
		t.Fatal(err)
	}
	if msgs[0].EventID != 2 || msgs[0].NextPos != 75 || string(msgs[0].Body) != "hello" || msgs[0].Headers[0].Value != "x1" ||
		!bytes.Equal(msgs[0].Raw, goldenRecord(t)) || msgs[1].EventID != 3 || msgs[1].NextFileID != 1 || len(msgs[1].Body) != 3 {
		t.Fatalf("messages %+v", msgs)
	}
	if f, err := ReadSubFrame(r, 1<<20); err != nil || f.Code != StatusAlive {
		t.Fatalf("alive: %+v %v", f, err)
	}
	if f, err := ReadSubFrame(r, 1<<20); err != nil || f.Code != StatusSubEnd {
		t.Fatalf("end: %+v %v", f, err)
	}
	if _, err := ReadSubFrame(r, 1<<20); err == nil || err.Error() != "EOF" || !IsBizError(err) {
		t.Fatalf("error frame: %v", err)
	}
	if _, err := ReadSubFrame(r, 1<<20); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
}

func TestReadReplicaFrame(t *testing.T) {
	block := []byte("\x28\x00\x00\x001795950274737\t2\t1\t1795950274737\torder\t9\n\x00\x00\x00\x00\x00\x00\x00\x00\n")
	stream, _ := AppendReplicaFrame(nil, block)
	if !bytes.Equal(stream[:14], []byte{0xc8, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(len(block)), 0, 0, 0}) {
		t.Fatalf("frame prefix % x", stream[:14])
	}
	stream = AppendReplyAlive(stream)
	stream = AppendReplyError(stream, "invalid replica eventId")
	stream = AppendReplySubEnd(stream)
	r := bytes.NewReader(stream)
	if f, err := ReadReplicaFrame(r, 1<<20); err != nil || !bytes.Equal(f.Body, block) {
		t.Fatalf("block frame: %+v %v", f, err)
	}
	if f, err := ReadReplicaFrame(r, 1<<20); err != nil || f.Code != StatusAlive {
		t.Fatalf("alive: %+v %v", f, err)
	}
	if _, err := ReadReplicaFrame(r, 1<<20); err == nil || err.Error() != "invalid replica eventId" {
		t.Fatalf("error: %v", err)
	}
	if _, err := ReadReplicaFrame(r, 1<<20); !errors.Is(err, ErrUnexpectedStatus) {
		t.Fatalf("255 in a replica stream: %v", err)
	}
}

// TestReadReplicaFrameV2: a commit frame is a unit of its own for a
// version 2 reader and not a replication stream for ReadReplicaFrame.
func TestReadReplicaFrameV2(t *testing.T) {
	stream := AppendCommitFrame(nil, 12, 3)
	stream = AppendReplyAlive(stream)
	stream = AppendCommitFrame(stream, 1, 1)
	r := bytes.NewReader(stream)
	f, err := ReadReplicaFrameV2(r, 1<<20)
	if err != nil || f.Code != StatusCommit {
		t.Fatalf("commit frame: %+v %v", f, err)
	}
	if cp, epoch, err := DecodeCommitFrame(f.Body); cp != 12 || epoch != 3 || err != nil {
		t.Fatalf("commit frame decoded %d %d %v", cp, epoch, err)
	}
	if f, err := ReadReplicaFrameV2(r, 1<<20); err != nil || f.Code != StatusAlive {
		t.Fatalf("alive: %+v %v", f, err)
	}
	if _, err := ReadReplicaFrame(r, 1<<20); !errors.Is(err, ErrUnexpectedStatus) {
		t.Fatalf("a commit frame for a version 0 reader: %v", err)
	}
	if _, err := ReadReplicaFrameV2(bytes.NewReader(AppendCommitFrame(nil, 1, 1)[:20]), 1<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a torn commit frame: %v", err)
	}
}

func TestParseSubMessagesInconsistent(t *testing.T) {
	one := AppendSubMessage(nil, 1, 2, 3, 4, rec(5))
	two := AppendSubMessage(append([]byte{}, one...), 1, 3, 3, 4, rec(1))
	badRecord := AppendSubMessage(nil, 1, 2, 3, 4, []byte{20, 0, 0, 0, 9, 0, 0, 0, 'a'})
	tests := []struct {
		name  string
		area  []byte
		count int
	}{
		{"count 0", one, 0},
		{"negative count", one, -1},
		{"count above messages", one, 2},
		{"count below messages", two, 1},
		{"huge count", two, 255},
		{"empty area", nil, 1},
		{"truncated fixed part", one[:20], 1},
		{"truncated record", one[:len(one)-1], 1},
		{"content size overruns", badRecord, 1},
		{"header count inconsistent", AppendSubMessage(nil, 1, 2, 3, 4, []byte{8, 0, 0, 0, 1, 0, 0, 0, 200, 0, 0, 0, 0, 0, 0, 0}), 1},
	}
	for _, tt := range tests {
		if msgs, err := ParseSubMessages(tt.area, tt.count); !errors.Is(err, ErrBadFrame) || msgs != nil {
			t.Errorf("%s: %v, want ErrBadFrame", tt.name, err)
		}
	}
	if msgs, err := ParseSubMessages(two, 2); err != nil || len(msgs) != 2 {
		t.Fatalf("valid: %v", err)
	}
}

package clientapi

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/topicblock"
)

// TestSubUnreadableData: a subscriber that reaches a topic file removed
// from under it, or a corrupt block, gets a 400 naming the problem (never a
// hang or a crash) and its connection stays usable.
func TestSubUnreadableData(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(path string) error
		want   string
	}{
		{"file removed", os.Remove, "subscription position is gone: "},
		{"corrupt block", func(path string) error {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("\xff\xff\xff\xff garbage"), 0)
			return err
		}, "corrupt data in topic file: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			kit.WriteConfig(t, dir, streamConfig(4096, 30000))
			p := kit.Start(t, dir)
			pub := kit.NewPublisher(t, p.Addr)
			pub.Create("f")
			for i := 0; i < 120; i++ {
				pub.Pub("f", testRecord(i, 200))
			}
			layout := topicLayout(t, filepath.Join(dir, "data"), "f")
			first := pub.Topics["f"][0].ID
			lastID := pub.Topics["f"][len(pub.Topics["f"])-1].ID
			if layout[first].fileID != 0 || layout[lastID].fileID < 3 {
				t.Fatalf("layout: first message in file %d, last in file %d", layout[first].fileID, layout[lastID].fileID)
			}
			c := kit.Dial(t, p.Addr)
			if err := c.Sub("f", "w", 0, 1, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			// The first frame is read from file 0; then file 1 is damaged.
			if u, err := c.Next(kit.UnitWait); err != nil || len(u.Msgs) != 1 || u.Msgs[0].EventID != first {
				t.Fatalf("first frame: %v %v", u, err)
			}
			path := filepath.Join(topicblock.Dir(filepath.Join(dir, "data", "topic"), []byte("f"), 10), "1.log")
			if err := tc.damage(path); err != nil {
				t.Fatal(err)
			}
			c.Ack(0)
			var last int64 = first
			for {
				u, err := c.Next(kit.UnitWait)
				if err != nil {
					t.Fatalf("after eventId %d: %v", last, err)
				}
				if u.Code == protocol.StatusError {
					if !strings.HasPrefix(u.Text, tc.want) || !strings.Contains(u.Text, "1.log") {
						t.Fatalf("400 %q, want %q naming 1.log", u.Text, tc.want)
					}
					break
				}
				if u.Code != protocol.StatusOK || layout[u.Msgs[0].EventID].fileID != 0 {
					t.Fatalf("after eventId %d got %v (file %d)", last, u, layout[u.Msgs[0].EventID].fileID)
				}
				last = u.Msgs[0].EventID
				c.Ack(0)
			}
			if err := c.InSync(); err != nil {
				t.Fatal(err)
			}
			// The slot was released: a new subscription past the damage
			// (after the first message of file 2) works.
			after := int64(0)
			for id, pl := range layout {
				if pl.fileID == 2 && pl.off == 0 {
					after = id
				}
			}
			if err := c.Sub("f", "w", after, 1, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if u, err := c.Next(kit.UnitWait); err != nil || len(u.Msgs) != 1 || u.Msgs[0].EventID != after+1 {
				t.Fatalf("sub after %s: %v %v", strconv.FormatInt(after, 10), u, err)
			}
		})
	}
}

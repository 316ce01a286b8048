package protocol

import (
	"encoding/json"
	"testing"
)

// The info (65), valid list (99) and list (100) replies are these bytes; an
// original client decodes them by these names, so field order and names
// must not change (docs/protocol.md §2.2).
func TestTopicInfoJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   TopicInfo
		want string
	}{
		{"zero", TopicInfo{}, `{"name":"","createTimeStamp":0,"expireAt":0,"createEventId":0,"stateChangeTime":0,"stateChangeEventId":0,"state":0,"topicRoot":""}`},
		{"full", TopicInfo{Name: "orders", CreateTime: 1700000000000, ExpireAt: 1800000000000, CreateEventID: 7,
			StateChangeTime: 1700000000500, StateChangeEventID: 9, State: TopicStateDeleted, TopicRoot: "1/2/orders"},
			`{"name":"orders","createTimeStamp":1700000000000,"expireAt":1800000000000,"createEventId":7,"stateChangeTime":1700000000500,"stateChangeEventId":9,"state":1,"topicRoot":"1/2/orders"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("got  %s\nwant %s", b, tc.want)
			}
		})
	}
}

func TestTopicInfoExpired(t *testing.T) {
	for _, tc := range []struct {
		expireAt, now int64
		want          bool
	}{
		{0, 1 << 40, false}, // no lifetime
		{1000, 999, false},
		{1000, 1000, true},
		{1000, 1001, true},
	} {
		ti := TopicInfo{ExpireAt: tc.expireAt}
		if got := ti.Expired(tc.now); got != tc.want {
			t.Errorf("ExpireAt %d at %d: Expired = %v, want %v", tc.expireAt, tc.now, got, tc.want)
		}
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/auth/authtest"
)

func TestFailoverCommandsOnAMaster(t *testing.T) {
	addr := startServer(t)
	ctl(t, addr, "", "topic", "create", "order").expect(t, 0)
	ctl(t, addr, "", "status").expect(t, 0, addr+": master, epoch 0, last eventId 1\n")
	r := ctl(t, addr, "", "status", "--json")
	var st struct {
		Role        string
		Epoch       uint64
		LastEventID int64 `json:"lastEventId"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Role != "master" || st.LastEventID != 1 {
		t.Errorf("status --json: %q %v", r.stdout, err)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"promote"}, 1, "already a master"},
		{[]string{"follow", "127.0.0.1:1"}, 1, "-rejoin"},
		{[]string{"follow"}, 2, "missing master address"},
		{[]string{"follow", "no-port"}, 2, "is not HOST:PORT"},
		{[]string{"follow", "h:0"}, 2, "not in 1..65535"},
		{[]string{"follow", "a:1", "b:2"}, 2, "unexpected argument"},
		{[]string{"promote", "x"}, 2, "unexpected argument"},
		{[]string{"status", "--help"}, 0, ""},
		{[]string{"promote", "--help"}, 0, ""},
		{[]string{"follow", "--help"}, 0, ""},
	} {
		r := ctl(t, addr, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d with %q", tc.args, r.code, r.stderr, tc.code, tc.stderr)
		}
	}
	// The refusals left the master as it was.
	ctl(t, addr, "", "status").expect(t, 0, "master, epoch 0")
}

func TestFailoverCommandsNeedAdmin(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users.json")
	authtest.WriteUsers(t, users,
		authtest.User{Name: "admin", Password: "adm-pw", Roles: []string{auth.RoleAdmin}},
		authtest.User{Name: "pubber", Password: "pub-pw", Publish: []string{"orders"}})
	addr, _ := startServerWith(t, fmt.Sprintf("auth:\n  enabled: true\n  usersFile: %s\n", users))
	pubber := []string{"SMSS_ADDR=" + addr, "SMSS_USER=pubber", "SMSS_PASSWORD=pub-pw"}
	admin := []string{"SMSS_ADDR=" + addr, "SMSS_USER=admin", "SMSS_PASSWORD=adm-pw"}

	r := ctlEnv(t, []string{"SMSS_ADDR=" + addr}, "", "status")
	if r.code != 1 || !strings.Contains(r.stderr, "authentication required") {
		t.Errorf("status without a login: %+v", r)
	}
	ctlEnv(t, pubber, "", "status").expect(t, 0, "master, epoch 0")
	for _, args := range [][]string{{"promote"}, {"follow", "127.0.0.1:1"}} {
		r := ctlEnv(t, pubber, "", args...)
		if r.code != 1 || !strings.Contains(r.stderr, `permission denied: user "pubber" may not promote or re-point this node (needs the admin role)`) {
			t.Errorf("%v as pubber: %+v", args, r)
		}
	}
	// The admin passes the permission check and gets the role's answer.
	r = ctlEnv(t, admin, "", "promote")
	if r.code != 1 || !strings.Contains(r.stderr, "already a master") {
		t.Errorf("promote as admin on a master: %+v", r)
	}
}

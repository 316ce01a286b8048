package main

import (
	"slices"
	"testing"
)

func TestSysmonEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want []string // nil: no re-execution
	}{
		{"no GODEBUG", []string{"A=1"}, []string{"A=1", "GODEBUG=" + sysmonSetting}},
		{"empty GODEBUG", []string{"GODEBUG=", "A=1"}, []string{"GODEBUG=" + sysmonSetting, "A=1"}},
		{"other settings kept", []string{"GODEBUG=gctrace=1,madvdontneed=1"}, []string{"GODEBUG=gctrace=1,madvdontneed=1," + sysmonSetting}},
		{"operator's schedtrace stands", []string{"GODEBUG=schedtrace=0"}, nil},
		{"operator's schedtrace among others", []string{"GODEBUG=gctrace=1,schedtrace=1000"}, nil},
		{"a lookalike is not schedtrace", []string{"GODEBUG=xschedtrace=1"}, []string{"GODEBUG=xschedtrace=1," + sysmonSetting}},
		{"the first GODEBUG is the one read", []string{"GODEBUG=gctrace=1", "GODEBUG=schedtrace=5"}, []string{"GODEBUG=gctrace=1," + sysmonSetting, "GODEBUG=schedtrace=5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.env)
			got := sysmonEnv(in)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("sysmonEnv(%q) = %q, want %q", tc.env, got, tc.want)
			}
			if !slices.Equal(in, tc.env) {
				t.Fatalf("sysmonEnv changed its input: %q", in)
			}
		})
	}
}

func TestSysmonAwake(t *testing.T) {
	for _, tc := range []struct {
		godebug string
		want    bool
	}{
		{"", false},
		{sysmonSetting, true},
		{"gctrace=1," + sysmonSetting, true},
		{sysmonSetting + ",gctrace=1", true},
		{"schedtrace=21474836470", false},
		{"schedtrace=1000", false},
	} {
		t.Setenv("GODEBUG", tc.godebug)
		if got := sysmonAwake(); got != tc.want {
			t.Errorf("GODEBUG=%q: sysmonAwake %v, want %v", tc.godebug, got, tc.want)
		}
	}
}

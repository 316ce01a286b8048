package broker

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestGroupStagesDocumented keeps doc.go's list of the group commit's
// stages equal to groupStages, name by name and in order, so the package
// doc never describes a sequence the writer does not run.
func TestGroupStagesDocumented(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^//\t([a-z]+) +\S`).FindAllSubmatch(src, -1) {
		documented = append(documented, string(m[1]))
	}
	var run []string
	for _, s := range groupStages {
		run = append(run, s.name)
	}
	if !slices.Equal(documented, run) {
		t.Errorf("doc.go lists the stages %q, groupStages runs %q", documented, run)
	}
}

// TestGroupStagesShape checks the table's shape that writer.process relies
// on: the write stages form one run after "stage", every stage has a run
// function, and only write stages have an undo.
func TestGroupStagesShape(t *testing.T) {
	if groupStages[0].name != "stage" || groupStages[0].when != always {
		t.Fatalf("the first stage is %q, want the always-run \"stage\"", groupStages[0].name)
	}
	last := always
	seen := map[string]bool{}
	for _, s := range groupStages {
		if s.run == nil {
			t.Errorf("stage %q has no run function", s.name)
		}
		if s.undo != nil && s.when != onWrite {
			t.Errorf("stage %q has an undo but is not a write stage", s.name)
		}
		if seen[s.name] {
			t.Errorf("stage %q listed twice", s.name)
		}
		seen[s.name] = true
		// always, then onWrite, onApplied, onCommitted in that order,
		// then always again: a stage of an earlier kind after a later
		// one would run with the wrong outcome known.
		if s.when != always && s.when < last {
			t.Errorf("stage %q (%d) comes after a stage of kind %d", s.name, s.when, last)
		}
		if s.when != always {
			last = s.when
		}
	}
}

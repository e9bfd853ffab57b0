package gmailrelay_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay"
)

// docs/states.md's diagram draws exactly gmailrelay.Transitions (plus
// same-state loops and the terminal [*] edges, which are not transitions).
func TestStatesDocDrawsTheTransitionTable(t *testing.T) {
	b, err := os.ReadFile("docs/states.md")
	if err != nil {
		t.Fatal(err)
	}
	edge := regexp.MustCompile(`(?m)^\s+(\[\*\]|[a-z]+) --> (\[\*\]|[a-z]+)`)
	drawn := map[[2]gmailrelay.State]bool{}
	for _, m := range edge.FindAllStringSubmatch(string(b), -1) {
		from, to := gmailrelay.State(m[1]), gmailrelay.State(m[2])
		if from == "[*]" {
			from = ""
		}
		if to == "[*]" || from == to {
			continue
		}
		if !gmailrelay.Allowed(from, to) {
			t.Errorf("docs/states.md draws %q → %s, which the table refuses", from, to)
		}
		drawn[[2]gmailrelay.State{from, to}] = true
	}
	for from, tos := range gmailrelay.Transitions {
		for _, to := range tos {
			if !drawn[[2]gmailrelay.State{from, to}] {
				t.Errorf("the table allows %q → %s, but docs/states.md does not draw it", from, to)
			}
		}
	}
}

// docs/states.md's table of states has one row for each of gmailrelay.States
// and none for a state the code does not have.
func TestStatesDocTableListsEveryState(t *testing.T) {
	b, err := os.ReadFile("docs/states.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## States\n")
	if !ok {
		t.Fatal(`docs/states.md has no "## States" section`)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|")
	rows := map[gmailrelay.State]int{}
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		s := gmailrelay.State(m[1])
		rows[s]++
		if !s.Valid() {
			t.Errorf("docs/states.md's table has a row for %q, which is not a state", s)
		}
	}
	for _, s := range gmailrelay.States {
		if rows[s] != 1 {
			t.Errorf("docs/states.md's table has %d rows for state %s, want 1", rows[s], s)
		}
	}
}

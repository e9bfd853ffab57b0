package api

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/sweeper"
)

// SweepCounts answers what sweeper.Result says, field for field: the JSON
// of POST /admin/sweep and of /v1/stats' sweeper object stays the one
// docs/api.md defines, whatever the sweeper's type grows.
func TestSweepCountsCarryEveryFieldOfTheSweepersResult(t *testing.T) {
	var r sweeper.Result
	v := reflect.ValueOf(&r).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch {
		case !v.Type().Field(i).IsExported():
		case f.Kind() == reflect.Int:
			f.SetInt(int64(i + 1)) // a distinct count per field
		case f.Type() == reflect.TypeFor[time.Duration]():
			f.SetInt(int64(i+1) * int64(time.Second))
		default:
			t.Fatalf("sweeper.Result.%s is a %s: give SweepCounts a field for it", v.Type().Field(i).Name, f.Type())
		}
	}
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(sweepCounts(r))
	if err != nil {
		t.Fatal(err)
	}
	var w, g map[string]any
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("SweepCounts JSON\n%s\nwant sweeper.Result's\n%s", got, want)
	}
}

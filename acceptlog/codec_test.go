package acceptlog

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// fillAll sets every field of the struct v points to a non-zero value
// derived from seed, so a field the codec forgets fails the round trip.
func fillAll(t *testing.T, v any, seed int) {
	t.Helper()
	rv := reflect.ValueOf(v).Elem()
	for i := 0; i < rv.NumField(); i++ {
		f, name := rv.Field(i), rv.Type().Field(i).Name
		switch f.Kind() {
		case reflect.String:
			f.SetString(name + "-" + string(rune('a'+seed+i)))
		case reflect.Int:
			f.SetInt(int64(-(seed + i) * 1000))
		case reflect.Uint64:
			f.SetUint(uint64(seed+i) << 40)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{name, "SENT", ""}))
		case reflect.Pointer:
			kept := seed%2 == 0
			f.Set(reflect.ValueOf(&kept))
		case reflect.Struct:
			if f.Type() != reflect.TypeOf(time.Time{}) {
				t.Fatalf("field %s: type %s not handled by the test", name, f.Type())
			}
			zone := time.FixedZone("", 3600*(seed%5))
			f.Set(reflect.ValueOf(time.Date(2026, 12, 3, 10, i, seed, 123456789, zone)))
		default:
			t.Fatalf("field %s: kind %s not handled by the test", name, f.Kind())
		}
	}
}

// viaJSON is what the log stored before issue 16 and read back.
func viaJSON[T any](t *testing.T, v *T) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantRoundTrip fills a record from each of three seeds and decodes it
// from its binary form and from the JSON form a log written before
// issue 16 holds: both must give back what the JSON form gives. The zero
// record must come back as itself. It returns the filled records and their
// copies decoded from the binary form.
func wantRoundTrip[T any](t *testing.T, encode func(*T) []byte, decode func([]byte, *T) error) (in, out []T) {
	t.Helper()
	for seed := range 3 {
		var rec T
		fillAll(t, &rec, seed)
		old, err := json.Marshal(&rec)
		if err != nil {
			t.Fatal(err)
		}
		want := viaJSON(t, &rec)
		for _, form := range []struct {
			name string
			data []byte
		}{{"binary", encode(&rec)}, {"old JSON", old}} {
			var got T
			if err := decode(form.data, &got); err != nil {
				t.Fatalf("%s record: %v", form.name, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s record:\n got %+v\nwant %+v", form.name, got, want)
			}
			if form.name == "binary" {
				in, out = append(in, rec), append(out, got)
			}
		}
	}
	var zero, got T
	if err := decode(encode(&zero), &got); err != nil || !reflect.DeepEqual(got, zero) {
		t.Errorf("zero %T: got %+v, %v", zero, got, err)
	}
	return in, out
}

func TestJobRecordRoundTripsEveryField(t *testing.T) {
	in, out := wantRoundTrip(t, encodeJob, decodeJob)
	for i, got := range out {
		for _, tm := range []time.Time{got.CreatedAt, got.UpdatedAt} {
			if !tm.Equal(in[i].CreatedAt) && !tm.Equal(in[i].UpdatedAt) {
				t.Errorf("time %v is neither stored instant", tm)
			}
		}
	}
}

func TestLineRecordRoundTripsEveryField(t *testing.T) {
	wantRoundTrip(t, encodeLine, decodeLine)
}

// A record cut inside a field is an error, never a half-filled job that
// looks whole; a record that ends between fields (written before a field
// was added) leaves the later fields zero.
func TestCutRecords(t *testing.T) {
	var j Job
	fillAll(t, &j, 0)
	rec := encodeJob(&j)
	errs := 0
	for n := 1; n < len(rec); n++ {
		var got Job
		if err := decodeJob(rec[:n], &got); err != nil {
			errs++
		}
	}
	if errs == 0 {
		t.Error("no cut of a job record was an error")
	}
	for _, bad := range [][]byte{nil, {}, {0x7f}, {recordV1, 0xff}} {
		var got Job
		if err := decodeJob(bad, &got); err == nil {
			t.Errorf("decodeJob(%x) = nil error", bad)
		}
	}
	// The fields before PrunedAt, then the record ends: PrunedAt is zero.
	j.PrunedAt = time.Time{}
	short := encodeJob(&j)
	short = short[:len(short)-1] // drop the zero PrunedAt's length byte
	var got Job
	if err := decodeJob(short, &got); err != nil || !got.PrunedAt.IsZero() || got.MessageID != j.MessageID {
		t.Errorf("record without its last field: %+v, %v", got, err)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	var j Job
	var ln Line
	f.Add(encodeJob(&j))
	f.Add(encodeLine(&ln))
	f.Add([]byte(`{"message_id":"<a@x>","state":"sent"}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		var j Job
		if decodeJob(v, &j) == nil && len(v) > 0 && v[0] == recordV1 {
			var again Job
			if err := decodeJob(encodeJob(&j), &again); err != nil || !reflect.DeepEqual(viaJSON(t, &again), viaJSON(t, &j)) {
				t.Errorf("re-encoded job differs: %+v vs %+v (%v)", again, j, err)
			}
		}
		var ln Line
		_ = decodeLine(v, &ln)
	})
}

func BenchmarkJobRecord(b *testing.B) {
	j := Job{MessageID: "<a.1@relay.example>", Channel: "n8n", Mailbox: "default", Fingerprint: "sha256:0123456789abcdef",
		State: StateSent, Attempts: 1, Effects: 1, GmailID: "18c0ffee", ThreadID: "18c0ffee", LabelIDs: []string{"SENT"},
		CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
	b.Run("binary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got Job
			if err := decodeJob(encodeJob(&j), &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v, _ := json.Marshal(&j)
			var got Job
			if err := json.Unmarshal(v, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}

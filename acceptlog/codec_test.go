package acceptlog

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
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

// viaJSON is v in the JSON form an older gmailrelay's log stored, read
// back.
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
// from its binary form and from the JSON form an older gmailrelay's log
// holds: both must give back what the JSON form gives. The zero
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
		if w, ok := any(&want).(*gmailrelay.Line); ok {
			// DSNStatus has a JSON key only on a bounce line (as
			// "status"); the binary record keeps it on any line.
			w.DSNStatus = any(&rec).(*gmailrelay.Line).DSNStatus
		}
		for _, form := range []struct {
			name string
			data []byte
		}{{"binary", encode(&rec)}, {"old JSON", old}} {
			var got T
			if err := decode(form.data, &got); err != nil {
				t.Fatalf("%s record: %v", form.name, err)
			}
			if l, ok := any(&got).(*gmailrelay.Line); ok && form.name == "old JSON" {
				l.DSNStatus = any(&want).(*gmailrelay.Line).DSNStatus
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

// encodeJobOnly is encodeJob with no line seqs, for the tests of Job's
// fields.
func encodeJobOnly(j *gmailrelay.Job) []byte { return encodeJob(j, nil) }

func TestJobRecordRoundTripsEveryField(t *testing.T) {
	in, out := wantRoundTrip(t, encodeJobOnly, decodeJob)
	for i, got := range out {
		for _, tm := range []time.Time{got.CreatedAt, got.UpdatedAt} {
			if !tm.Equal(in[i].CreatedAt) && !tm.Equal(in[i].UpdatedAt) {
				t.Errorf("time %v is neither stored instant", tm)
			}
		}
	}
}

// The seqs of a job's lines, the record's last field, come back as
// written, with every field of the job: none, one, dozens (a job through
// review, resends and verify looks), gaps of every varint length.
func TestJobRecordRoundTripsLineSeqs(t *testing.T) {
	wide, dense := []uint64{1}, []uint64{1000}
	for i := range 60 {
		wide = append(wide, wide[len(wide)-1]+uint64(1)<<(i%57))
		dense = append(dense, dense[len(dense)-1]+uint64(i*37%300+1)) // a busy log: others' lines between
	}
	for _, seqs := range [][]uint64{nil, {1}, {7, 8, 9}, {1 << 40, 1<<40 + 1, 1<<63 - 1, 1<<64 - 1}, wide, dense} {
		var j gmailrelay.Job
		fillAll(t, &j, len(seqs))
		want := viaJSON(t, &j)
		rec := encodeJob(&j, encodeSeqs(seqs))
		var got gmailrelay.Job
		list, err := decodeJobRecord(rec, &got)
		if err != nil {
			t.Fatalf("%d seqs: %v", len(seqs), err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%d seqs: job\n got %+v\nwant %+v", len(seqs), got, want)
		}
		gotSeqs, err := list.seqs()
		if err != nil || !reflect.DeepEqual(gotSeqs, seqs) {
			t.Errorf("seqs = %v, %v; want %v", gotSeqs, err, seqs)
		}
		if last, err := list.last(); err != nil || len(seqs) > 0 && last != seqs[len(seqs)-1] {
			t.Errorf("last of %v = %d, %v", seqs, last, err)
		}
		if n := len(rec) - len(encodeJob(&j, nil)); len(seqs) > 0 && &seqs[0] == &dense[0] && n > 2*len(seqs)+1 {
			t.Errorf("%d seqs at most 300 apart take %d bytes, want at most 2 each", len(seqs), n)
		}
	}
}

// A seq list that does not strictly increase, or whose varint is cut or
// overflows, is an error, never a list.
func TestBadSeqLists(t *testing.T) {
	for _, bad := range []string{"\x05\x00", "\x00", "\x80", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02",
		"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x01"} {
		if got, err := seqList(bad).seqs(); err == nil {
			t.Errorf("seqs of %q = %v, want an error", bad, got)
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
	var j gmailrelay.Job
	fillAll(t, &j, 0)
	rec := encodeJob(&j, encodeSeqs([]uint64{3, 4, 500}))
	errs := 0
	for n := 1; n < len(rec); n++ {
		var got gmailrelay.Job
		if err := decodeJob(rec[:n], &got); err != nil {
			errs++
		}
	}
	if errs == 0 {
		t.Error("no cut of a job record was an error")
	}
	for _, bad := range [][]byte{nil, {}, {0x7f}, {recordV1, 0xff}} {
		var got gmailrelay.Job
		if err := decodeJob(bad, &got); err == nil {
			t.Errorf("decodeJob(%x) = nil error", bad)
		}
	}
	// The fields before PrunedAt, then the record ends: PrunedAt is zero
	// and the record lists no line seqs.
	j.PrunedAt, j.LeaseUntil, j.Bounced, j.Delayed = time.Time{}, time.Time{}, 0, 0
	short := encodeJob(&j, nil)
	short = short[:len(short)-5] // drop the zero PrunedAt's length byte, the empty seqs, the zero lease and the zero bounce counts
	var got gmailrelay.Job
	seqs, err := decodeJobRecord(short, &got)
	if err != nil || !got.PrunedAt.IsZero() || got.MessageID != j.MessageID || seqs != "" {
		t.Errorf("record without its last fields: %+v, %q, %v", got, seqs, err)
	}
	// A record from before LeaseUntil: it ends after the seqs.
	pre := encodeJob(&j, encodeSeqs([]uint64{4, 9}))
	pre = pre[:len(pre)-3]
	got = gmailrelay.Job{LeaseUntil: time.Now()}
	seqs, err = decodeJobRecord(pre, &got)
	if all, _ := seqs.seqs(); err != nil || !got.LeaseUntil.IsZero() || len(all) != 2 {
		t.Errorf("record without a lease: lease %v, seqs %q, %v; want zero lease, 2 seqs", got.LeaseUntil, seqs, err)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	var j gmailrelay.Job
	var ln gmailrelay.Line
	f.Add(encodeJob(&j, nil))
	f.Add(encodeJob(&j, encodeSeqs([]uint64{1, 2, 300})))
	f.Add(encodeLine(&ln))
	f.Add([]byte(`{"message_id":"<a@x>","state":"sent"}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		var j gmailrelay.Job
		if seqs, err := decodeJobRecord(v, &j); err == nil && len(v) > 0 && v[0] == recordV1 {
			var again gmailrelay.Job
			seqs2, err := decodeJobRecord(encodeJob(&j, []byte(seqs)), &again)
			if err != nil || !reflect.DeepEqual(viaJSON(t, &again), viaJSON(t, &j)) || seqs2 != seqs {
				t.Errorf("re-encoded job differs: %+v %q vs %+v %q (%v)", again, seqs2, j, seqs, err)
			}
			if list, err := seqs.seqs(); err == nil && string(encodeSeqs(list)) != string(seqs) {
				t.Errorf("seqs %v re-encode as %q, read from %q", list, encodeSeqs(list), seqs)
			}
		}
		var ln gmailrelay.Line
		_ = decodeLine(v, &ln)
	})
}

func BenchmarkJobRecord(b *testing.B) {
	j := gmailrelay.Job{MessageID: "<a.1@relay.example>", Channel: "n8n", Mailbox: "default", Fingerprint: "sha256:0123456789abcdef",
		State: gmailrelay.StateSent, Attempts: 1, Effects: 1, GmailID: "18c0ffee", ThreadID: "18c0ffee", LabelIDs: []string{"SENT"},
		CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
	b.Run("binary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got gmailrelay.Job
			if err := decodeJob(encodeJob(&j, nil), &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v, _ := json.Marshal(&j)
			var got gmailrelay.Job
			if err := json.Unmarshal(v, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package console

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay/faultmodes"
)

// modeOnly is a Relay that knows only its mode, all the sign-in page
// asks of it (the rest panics if called).
type modeOnly struct{ Relay }

func (modeOnly) Mode() string { return "sandbox" }

// FuzzSignIn: the sign-in form is outside input, unauthenticated. Whatever
// its body and sign-in cookie, the console never fails with a 5xx, and
// starts a session exactly when the form parses, its CSRF token is the
// cookie's (not empty) and its token is the relay's: admin for the admin
// token, viewer for the API token.
func FuzzSignIn(f *testing.F) {
	const apiToken, adminToken = "api-secret-token", "admin-secret-token"
	for _, s := range [][2]string{
		{"csrf=abc&token=admin-secret-token", "abc"}, {"csrf=abc&token=api-secret-token", "abc"},
		{"csrf=abc&token=admin-secret-token", "abd"}, {"csrf=&token=admin-secret-token", ""},
		{"token=admin-secret-token", "abc"}, {"csrf=a%20b&token=admin-secret-token", "a b"},
		{"csrf=abc;token=admin-secret-token", "abc"}, {"csrf=abc&csrf=abd&token=api-secret-token", "abd"},
		{"csrf=%zz&token=x", "x"}, {"csrf=abc&token=admin-secret-token&token=api-secret-token", "abc"},
		{"csrf=abc&token=ADMIN-SECRET-TOKEN", "abc"}, {"csrf=abc&token=admin-secret-token%00", "abc"},
	} {
		f.Add(s[0], s[1])
	}
	c := New(Config{Relay: modeOnly{}, APIToken: apiToken, AdminToken: adminToken, Logger: zerolog.Nop()})
	f.Fuzz(func(t *testing.T, form, cookie string) {
		r := httptest.NewRequest(http.MethodPost, "/ui/login", strings.NewReader(form))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Cookie", loginCookie+"="+cookie)
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)

		want := roleNone
		values, err := url.ParseQuery(form)
		if ck, _ := r.Cookie(loginCookie); err == nil && ck != nil && values.Get(csrfField) != "" && values.Get(csrfField) == ck.Value {
			switch values.Get("token") {
			case adminToken:
				want = roleAdmin
			case apiToken:
				want = roleViewer
			}
		}
		got := roleNone
		for _, sc := range w.Result().Cookies() {
			if sc.Name == sessionCookie && sc.MaxAge > 0 {
				if s := c.sessions.get(sc.Value); s != nil {
					got = s.role
				}
			}
		}
		if got != want || w.Code >= 500 || (want != roleNone) != (w.Code == http.StatusSeeOther) {
			t.Fatalf("form %q, cookie %q: %d, session %v; want session %v", form, cookie, w.Code, got, want)
		}
	})
}

// FuzzSpecFromForm: the console's fault form is outside input. A bad
// number is bad input (400) naming its field; every field is the trimmed
// first value; and a rule the console would add is the rule the JSON API
// (POST /admin/faults, faultmodes.ParseSpec) reads from that rule's JSON.
func FuzzSpecFromForm(f *testing.F) {
	for _, s := range [][7]string{
		{"fail-before-forward", "", "", "", "", "", ""},
		{"forward-then-drop-response", "billing", "k1", "3", "0.25", "5m", "504"},
		{" crash-after-forward ", "", "<job-abc@d>", " 1 ", "1", "", ""},
		{"fail-before-forward", "", "", "x", "", "", ""}, {"fail-before-forward", "", "", "", "NaN", "", ""},
		{"fail-before-forward", "", "", "", "1e-320", "", ""}, {"fail-before-forward", "", "", "0", "Inf", "-5s", "cut"},
		{"fail-before-forward", "", "", "99999999999999999999", "0x1p-2", "1h", ""}, {"", "", "", "", "", "", ""},
		{"fail-before-forward", "a<b>&", "k\u2028", "+7", ".5", "1.5h", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], s[6])
	}
	f.Fuzz(func(t *testing.T, mode, channel, key, count, probability, ttl, drop string) {
		form := map[string][]string{"mode": {mode}, "channel": {channel}, "key": {key}, "count": {count},
			"probability": {probability}, "ttl": {ttl}, "drop": {drop, "second"}}
		spec, err := specFromForm(form)
		if err != nil {
			var pe *pageError
			if !errors.As(err, &pe) || pe.status != http.StatusBadRequest {
				t.Fatalf("error %v, want a 400 page", err)
			}
			field, _, _ := strings.Cut(pe.msg, ":")
			if field != "count" && field != "probability" || strings.TrimSpace(form[field][0]) == "" {
				t.Fatalf("error %q does not name a number field that was given", pe.msg)
			}
			return
		}
		trimmed := faultmodes.Spec{Mode: faultmodes.Mode(strings.TrimSpace(mode)), Channel: strings.TrimSpace(channel),
			Key: strings.TrimSpace(key), TTL: strings.TrimSpace(ttl), Drop: strings.TrimSpace(drop)}
		if v := strings.TrimSpace(count); v != "" {
			n, _ := strconv.Atoi(v)
			trimmed.Count = &n
		}
		var p float64 // compared by its bits: NaN parses
		if v := strings.TrimSpace(probability); v != "" {
			p, _ = strconv.ParseFloat(v, 64)
			if spec.Probability == nil || math.Float64bits(*spec.Probability) != math.Float64bits(p) {
				t.Fatalf("probability %q read as %v", v, spec.Probability)
			}
		} else if spec.Probability != nil {
			t.Fatalf("probability %q read as %v", probability, *spec.Probability)
		}
		got := spec
		got.Probability = nil
		if !reflect.DeepEqual(got, trimmed) {
			t.Fatalf("specFromForm = %+v, want the trimmed values %+v", got, trimmed)
		}
		// The JSON API cannot carry text that is not UTF-8 (encoding/json
		// writes U+FFFD); a rule failing Validate is never added.
		for _, s := range []string{string(spec.Mode), spec.Channel, spec.Key, spec.TTL, spec.Drop} {
			if !utf8.ValidString(s) {
				return
			}
		}
		if spec.Validate() != nil {
			return
		}
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("marshal %+v: %v", spec, err)
		}
		again, err := faultmodes.ParseSpec(b)
		if err != nil || !reflect.DeepEqual(again, spec) {
			t.Fatalf("the console adds %+v; the JSON API reads %s as %+v, %v", spec, b, again, err)
		}
	})
}

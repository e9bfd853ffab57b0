package fielderr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gmailrelay/gmailrelay/internal/fielderr"
)

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		err  *fielderr.Error
		want string
	}{
		{fielderr.New("ttl", "must be %s", "positive"), "ttl: must be positive"},
		{&fielderr.Error{Message: "empty body"}, "empty body"},
		{&fielderr.Error{Field: "channels.a.grace", Message: "too short", Line: 3}, "line 3: channels.a.grace: too short"},
		{&fielderr.Error{Message: "bad YAML", Line: 1}, "line 1: bad YAML"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestFoundThroughWrapping(t *testing.T) {
	err := fmt.Errorf("--policy: %w", fielderr.New("retention", "must be at least 1h"))
	var fe *fielderr.Error
	if !errors.As(err, &fe) || fe.Field != "retention" {
		t.Fatalf("errors.As(%v) = %+v", err, fe)
	}
}

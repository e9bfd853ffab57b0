package gmailrelay

import (
	"reflect"
	"testing"
)

func TestDeliveryOf(t *testing.T) {
	bounce := func(r, action string) Line { return Line{Kind: KindBounce, Recipient: r, Action: action} }
	for _, c := range []struct {
		name       string
		lines      []Line
		recipients int
		want       Delivery
	}{
		{"no report", []Line{{Kind: KindEffect}}, 2, Delivery{State: DeliveryNoReport, Bounced: []string{}, Delayed: []string{}}},
		{"one of two failed", []Line{bounce("x@bounce.test", "failed")}, 2, Delivery{State: DeliveryPartlyBounced, Bounced: []string{"x@bounce.test"}, Delayed: []string{}}},
		{"all failed, reported twice", []Line{bounce("x@b", "failed"), bounce("X@b", "failed")}, 1, Delivery{State: DeliveryBounced, Bounced: []string{"x@b"}, Delayed: []string{}}},
		{"delayed then failed", []Line{bounce("s@d", "delayed"), bounce("s@d", "failed")}, 2, Delivery{State: DeliveryPartlyBounced, Bounced: []string{"s@d"}, Delayed: []string{}}},
		{"delayed", []Line{bounce("s@d", "delayed"), bounce("s@d", "delayed")}, 2, Delivery{State: DeliveryDelayed, Bounced: []string{}, Delayed: []string{"s@d"}}},
		{"recipients unknown", []Line{bounce("x@b", "failed")}, 0, Delivery{State: DeliveryBounced, Bounced: []string{"x@b"}, Delayed: []string{}}},
	} {
		if got := DeliveryOf(c.lines, c.recipients); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

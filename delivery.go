package gmailrelay

import "strings"

// Delivery states of a sent job (Delivery.State).
const (
	DeliveryBounced       = "bounced"        // every recipient failed
	DeliveryPartlyBounced = "partly_bounced" // some recipients failed
	DeliveryDelayed       = "delayed"        // no failure, some delayed
	DeliveryNoReport      = "no_report"      // no delivery report names the job
)

// Delivery is what the delivery reports a mailbox received say of a job:
// Gmail accepted the message (the job stays sent); some recipients'
// servers may not have.
type Delivery struct {
	State   string   `json:"state"`
	Bounced []string `json:"bounced"`
	Delayed []string `json:"delayed"`
}

// Report actions a bounce line carries (RFC 3464 §2.3.3).
const (
	ActionFailed  = "failed"
	ActionDelayed = "delayed"
)

// DeliveryOf reads the job's bounce lines: the recipients reported failed,
// those reported delayed and not (since) failed, and the state; recipients
// is how many the message had (0 when unknown: then any failure reads as
// bounced).
func DeliveryOf(lines []Line, recipients int) Delivery {
	d := Delivery{Bounced: []string{}, Delayed: []string{}}
	failed, delayed := map[string]bool{}, map[string]bool{}
	for _, l := range lines {
		if l.Kind != KindBounce {
			continue
		}
		r := strings.ToLower(l.Recipient)
		switch l.Action {
		case ActionFailed:
			if !failed[r] {
				failed[r] = true
				d.Bounced = append(d.Bounced, l.Recipient)
			}
		case ActionDelayed:
			delayed[r] = true
		}
	}
	for _, l := range lines {
		r := strings.ToLower(l.Recipient)
		if l.Kind == KindBounce && l.Action == ActionDelayed && delayed[r] && !failed[r] {
			delayed[r] = false // once
			d.Delayed = append(d.Delayed, l.Recipient)
		}
	}
	switch {
	case len(d.Bounced) > 0 && (recipients == 0 || len(d.Bounced) >= recipients):
		d.State = DeliveryBounced
	case len(d.Bounced) > 0:
		d.State = DeliveryPartlyBounced
	case len(d.Delayed) > 0:
		d.State = DeliveryDelayed
	default:
		d.State = DeliveryNoReport
	}
	return d
}

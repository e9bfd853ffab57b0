package testenv

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
)

// Replica builds another relay process of the same deployment: over e's
// emulator and clock (o.Emulator and o.HostClock are ignored) and the same
// acceptance log, with its own Gmail client (or o.Provider), fault rules,
// quota and Service, each made from o as New makes them; o.Now nil means
// e's Now. Its log is its own handle on the same data when o.OpenLog or
// e's Options.OpenLog opens one (each PostgreSQL replica has its own
// pool), else e's bbolt log itself, which one process holds (opened now
// when e has none yet, as after Start); closing it (Restart) closes e's.
func (e *Env) Replica(o Options) *Env {
	e.T.Helper()
	r := &Env{T: e.T, Clock: e.Clock, Emulator: e.Emulator, EmulatorURL: e.EmulatorURL, Path: e.Path}
	if o.Now == nil {
		o.Now = e.Now
	}
	if o.OpenLog == nil {
		o.OpenLog = e.opts.OpenLog
	}
	if o.OpenLog == nil {
		if e.Store == nil {
			e.OpenLog()
		}
		shared := e.Store
		o.OpenLog = func(testing.TB, func() time.Time) gmailrelay.Store { return shared }
	}
	r.configure(o)
	r.Open(e.EmulatorURL)
	return r
}

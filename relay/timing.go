package relay

import (
	"context"
	"time"
)

// Timing is where one Send's time went: admission before the log (the
// channel, the front door's read of the job, quota and fault decision),
// the admission commit (the forwarding line made durable), the Gmail call,
// and the outcome commit. A phase the Send did not reach stays zero.
type Timing struct {
	Admit, FirstCommit, Gmail, OutcomeCommit time.Duration
}

// TimingObserver hears where a Send's time went: the benchmark's phase
// breakdown (api.Config.OnSendTiming). It is carried by the Send's context
// (WithTimingObserver), so that each request hears about its own Send.
type TimingObserver interface {
	// SendTimed is called once, when the Send returns, with its phases.
	SendTimed(t Timing)
}

// timingKey is the context key of a TimingObserver.
type timingKey struct{}

// WithTimingObserver returns ctx carrying o: a Send on the returned context
// reports its Timing to o when it returns.
func WithTimingObserver(ctx context.Context, o TimingObserver) context.Context {
	return context.WithValue(ctx, timingKey{}, o)
}

// timingObserver returns the TimingObserver ctx carries, or nil.
func timingObserver(ctx context.Context) TimingObserver {
	o, _ := ctx.Value(timingKey{}).(TimingObserver)
	return o
}

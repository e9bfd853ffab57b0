package acceptlog

import (
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DefaultGroupWait is Options.GroupWait's default: at most this is added
// to a commit under load, against ≈ 35 % of the relay's CPU a send at
// 150 ms of Gmail latency (docs/benchmarks.md, issue 16).
const DefaultGroupWait = time.Millisecond

// commit runs txFn in a group commit (see commitWaiter).
func (l *Log) commit(txFn func(*bolt.Tx) error) error {
	return l.commitWaiter(&waiter{fn: txFn, wake: make(chan struct{}, 1)})
}

// commitWaiter runs w in a group commit: the first Mutate to arrive when
// no commit is running leads, committing at once with everything queued so
// far in one write transaction (one fsync); Mutates arriving meanwhile
// queue, and when the leader's commit is done the first of them leads the
// next group. A lone writer so never waits for company, and under
// concurrency the group grows with the time a commit takes. When a recent
// group had company (one of the last companyMemory), a new leader (one
// that found no commit running) also waits up to Options.GroupWait for
// more to join: spread-out arrivals (sends 150 ms apart at Gmail)
// otherwise make groups of one to three, each paying a whole commit
// (issue 16).
// If a group's transaction fails, each member is retried alone so one bad
// member cannot fail the others (as bbolt's Batch does).
func (l *Log) commitWaiter(w *waiter) error {
	if l.alwaysBatch {
		return l.db.Batch(w.run)
	}
	l.group.mu.Lock()
	l.group.queue = append(l.group.queue, w)
	if l.group.leading {
		if l.group.full != nil && len(l.group.queue) >= l.group.want {
			close(l.group.full)
			l.group.full = nil
		}
		l.group.mu.Unlock()
		<-w.wake
		if w.next != nil {
			return l.lead(w.next, w)
		}
		return w.err
	}
	l.group.leading = true
	if l.groupWait > 0 && l.group.company >= 2 && l.group.since <= companyMemory {
		// A recent group had company: more Mutates are likely on their
		// way. Wait for them, up to groupWait, or until twice that
		// group's number have queued.
		l.group.want = 2 * l.group.company
		l.group.full = make(chan struct{})
		full := l.group.full
		l.group.mu.Unlock()
		t := time.NewTimer(l.groupWait)
		select {
		case <-full:
		case <-t.C:
		}
		t.Stop()
		l.group.mu.Lock()
		l.group.full = nil
	}
	batch := l.group.queue
	l.group.queue = nil
	l.group.mu.Unlock()
	return l.lead(batch, w)
}

// groupCommit is the queue of Mutates waiting for the running commit.
type groupCommit struct {
	mu      sync.Mutex
	queue   []*waiter
	leading bool
	// company is how many the last group of two or more held, since how
	// many groups ago; full, while a new leader waits for company, is
	// closed when want have queued.
	company, since int
	want           int
	full           chan struct{}
}

// companyMemory is how many groups of one after a group with company a
// leader still waits for company: at 150 ms of Gmail latency arrivals are
// spread out enough that many groups hold one Mutate although 64 sends
// are in flight; a lone writer's groups never have company.
const companyMemory = 16

// waiter is one queued Mutate. wake is signalled when its group has been
// committed (err says how) or, with next set, when it is to lead the next
// group.
type waiter struct {
	fn   func(*bolt.Tx) error
	m    *mutation // a Mutate's waiter runs m instead of fn
	err  error
	next []*waiter
	wake chan struct{}
}

func (w *waiter) run(tx *bolt.Tx) error {
	if w.m != nil {
		return w.m.run(tx)
	}
	return w.fn(tx)
}

// lead commits batch (which holds self), wakes its members and hands the
// lead to the first Mutate that queued meanwhile. A callback that panics
// fails its whole group and the panic goes on up the leader's stack, but
// only after the lead is handed over: the log never stays locked.
func (l *Log) lead(batch []*waiter, self *waiter) error {
	defer func() {
		if p := recover(); p != nil {
			for _, w := range batch {
				w.err = fmt.Errorf("acceptlog: a callback in the same commit group panicked: %v", p)
			}
			l.handOver(batch, self)
			panic(p)
		}
	}()
	err := l.commitTx(func(tx *bolt.Tx) error {
		for _, w := range batch {
			if err := w.run(tx); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case err == nil:
	case len(batch) == 1:
		batch[0].err = err
	default:
		for _, w := range batch {
			w.err = l.commitTx(w.run)
		}
	}
	l.handOver(batch, self)
	return self.err
}

// handOver wakes batch's members but self and gives the lead to the first
// Mutate that queued meanwhile, or ends the leading.
func (l *Log) handOver(batch []*waiter, self *waiter) {
	l.group.mu.Lock()
	if len(batch) >= 2 {
		l.group.company, l.group.since = len(batch), 0
	} else {
		l.group.since++
	}
	next := l.group.queue
	l.group.queue = nil
	if len(next) == 0 {
		l.group.leading = false
	}
	l.group.mu.Unlock()
	for _, w := range batch {
		if w != self {
			w.wake <- struct{}{}
		}
	}
	if len(next) > 0 {
		next[0].next = next
		next[0].wake <- struct{}{}
	}
}

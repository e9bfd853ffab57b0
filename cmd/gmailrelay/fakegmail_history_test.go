package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// --history-lag reads like --index-lag (a duration or a distribution) and
// sets the history lag only; --history-retention defaults to a week.
func TestFakeGmailHistoryFlags(t *testing.T) {
	cases := []struct {
		args      []string
		lag       time.Duration
		dist      gmailfake.LagDistribution
		retention time.Duration
	}{
		{nil, 0, gmailfake.LagDistribution{}, gmailfake.DefaultHistoryRetention},
		{[]string{"--history-lag", "5s", "--history-retention", "2h"}, 5 * time.Second, gmailfake.LagDistribution{}, 2 * time.Hour},
		{[]string{"--history-lag=p50=1s,p99=30s,max=5m", "--index-lag", "1m"}, 0,
			gmailfake.LagDistribution{P50: time.Second, P99: 30 * time.Second, Max: 5 * time.Minute}, gmailfake.DefaultHistoryRetention},
	}
	for _, tc := range cases {
		var stderr bytes.Buffer
		_, opts, code, ok := parseFakeGmail(tc.args, &stderr)
		if !ok {
			t.Fatalf("%v: exit %d: %s", tc.args, code, stderr.String())
		}
		if opts.HistoryLag != tc.lag || opts.HistoryLagDistribution != tc.dist || opts.HistoryRetention != tc.retention {
			t.Errorf("%v: history lag %v %v retention %v, want %v %v %v", tc.args,
				opts.HistoryLag, opts.HistoryLagDistribution, opts.HistoryRetention, tc.lag, tc.dist, tc.retention)
		}
	}
	_, opts, _, _ := parseFakeGmail([]string{"--history-lag", "5s"}, &bytes.Buffer{})
	if opts.IndexLag != 0 || !opts.IndexLagDistribution.IsZero() {
		t.Errorf("--history-lag set the index lag: %v %v", opts.IndexLag, opts.IndexLagDistribution)
	}
}

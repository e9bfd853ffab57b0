package relay

import (
	"context"
	"errors"
	"strings"
)

// Quota units of the history calls (Gmail API's usage limits page).
const (
	UnitsHistory = 2 // users.history.list
	UnitsProfile = 1 // users.getProfile
)

// JobHeader is the header every message the relay builds or forwards
// carries: the job's hash, the local part of its derived Message-ID. A
// copy whose Message-ID Gmail replaced still names its job through it.
const JobHeader = "X-Gmailrelay-Job"

// JobHash is the JobHeader value of the job messageID: its Message-ID's
// local part (between "<" and the last "@").
func JobHash(messageID string) string {
	id := strings.TrimSuffix(strings.TrimPrefix(messageID, "<"), ">")
	if i := strings.LastIndexByte(id, '@'); i >= 0 {
		return id[:i]
	}
	return id
}

// HistoryAdded is one message a history record says was added to the
// mailbox.
type HistoryAdded struct {
	ID       string
	ThreadID string
	LabelIDs []string
}

// HistoryRecord is one record of a mailbox's history (users.history.list):
// its id and the messages it added. Records of other kinds (labels,
// deletions) carry no Added.
type HistoryRecord struct {
	ID    uint64
	Added []HistoryAdded
}

// HistoryPage is one page of a history listing, oldest record first.
// HistoryID is the mailbox's current history id as Gmail answered it:
// once a listing has no NextPageToken, the history is known complete up
// to it.
type HistoryPage struct {
	Records       []HistoryRecord
	NextPageToken string
	HistoryID     uint64
}

// ErrHistoryExpired is wrapped by a History error when Gmail no longer
// keeps the records after the start id (404: Google keeps them "at least
// a week", sometimes hours). The caller starts a new cursor from Profile
// and looks for what it missed another way.
var ErrHistoryExpired = errors.New("gmail: history cursor expired")

// HistoryReader reads the mailbox's history (every Provider does): Gmail's
// own change log, which lists every message added to a label in order,
// without the search index's lag.
type HistoryReader interface {
	// Profile returns the mailbox's current history id
	// (users.getProfile).
	Profile(ctx context.Context, mailbox string) (historyID uint64, err error)
	// History lists the records after start that added a message with
	// label (users.history.list, historyTypes messageAdded), one page of
	// at most 500. An expired start wraps ErrHistoryExpired.
	History(ctx context.Context, mailbox string, start uint64, label, pageToken string) (HistoryPage, error)
}

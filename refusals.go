package gmailrelay

import (
	"context"
	"errors"
	"fmt"
)

// ErrWritesRefused is wrapped by the error of a write the log's storage
// refused (a full disk, an I/O error, a lost database connection), and by
// every error a Store answers while it cannot reach its storage at all.
// Such a write is not known to have happened: on a clean refusal nothing
// of it is stored, but a commit whose acknowledgement was lost (a broken
// connection during COMMIT, a failed sync after the write) may be stored
// all the same. The log keeps no half of it either way.
var ErrWritesRefused = errors.New("the acceptance log refuses writes")

// WriteHealth is implemented by a Store that tells when its storage
// refuses writes (the bbolt file and PostgreSQL both do). The relay
// answers sends with 503 while WritesRefused says so, and retries the
// storage with ProbeWrite until it takes writes again.
type WriteHealth interface {
	// WritesRefused returns why the storage refused the last write (its
	// error, without ErrWritesRefused), while no write has succeeded
	// since; nil otherwise.
	WritesRefused() error
	// ProbeWrite makes a small write that tells whether the storage
	// takes writes again; its success, and only that, ends the refusal
	// (on a full disk other writes may still fit in room the log already
	// holds, and the next one would not). A refused probe returns an
	// error wrapping ErrWritesRefused.
	ProbeWrite(ctx context.Context) error
}

// WritesRefused returns s's WritesRefused, or nil for a Store that does
// not tell (WriteHealth).
func WritesRefused(s Store) error {
	if h, ok := s.(WriteHealth); ok {
		return h.WritesRefused()
	}
	return nil
}

// ErrCaseTwin is wrapped by the error Mutate returns (a *CaseTwinError)
// for a new job whose Message-ID differs from an existing job's only in
// ASCII case. Nothing is written.
var ErrCaseTwin = errors.New("a job's Message-ID differs from this one only in case")

// CaseTwinError is the refusal of a new job MessageID because the job
// Existing has the same Message-ID but for ASCII case.
type CaseTwinError struct {
	MessageID, Existing string
}

func (e *CaseTwinError) Error() string {
	return fmt.Sprintf("job %s: Message-ID differs from job %s's only in case (job identity ignores case)", e.MessageID, e.Existing)
}

// Unwrap makes the error match ErrCaseTwin.
func (e *CaseTwinError) Unwrap() error { return ErrCaseTwin }

// FoldMessageID is id with its ASCII letters in lower case (other bytes
// as they are): two Message-IDs with the same fold are one job's.
// PostgreSQL computes the same with translate() over A–Z (pglog).
func FoldMessageID(id string) string {
	for i := 0; i < len(id); i++ {
		if c := id[i]; 'A' <= c && c <= 'Z' {
			b := []byte(id)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return id
}

package console

import (
	"testing"
	"time"
)

// At its bound the store ends the session used least recently, not a
// random one (possibly an admin's): here the first viewer's,
// while the admin who signed in first but keeps working stays signed in.
func TestSessionStoreEvictsLeastRecentlyUsed(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	s := newSessions(time.Hour, func() time.Time { return now })
	admin, _ := s.create(roleAdmin)
	ids := make([]string, 0, maxSessions)
	for range maxSessions - 1 {
		id, _ := s.create(roleViewer)
		ids = append(ids, id)
	}
	if s.get(admin) == nil {
		t.Fatal("the admin's session is gone before the bound")
	}
	id, _ := s.create(roleViewer) // one past the bound
	if s.get(ids[0]) != nil {
		t.Fatal("the least recently used session survived; another was ended instead")
	}
	if s.get(admin) == nil || s.get(id) == nil {
		t.Fatal("the admin's session (used recently) or the new one was ended")
	}
	for _, kept := range ids[1:] {
		if s.get(kept) == nil {
			t.Fatal("a session other than the least recently used one was ended")
		}
	}
}

// Expired sessions are ended before any live one.
func TestSessionStoreEndsExpiredFirst(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	s := newSessions(time.Hour, func() time.Time { return now })
	old, _ := s.create(roleAdmin)
	now = now.Add(59 * time.Minute)
	ids := make([]string, 0, maxSessions)
	for range maxSessions - 1 {
		id, _ := s.create(roleViewer)
		ids = append(ids, id)
	}
	s.get(old) // the most recently used, but about to expire
	now = now.Add(time.Minute)
	s.create(roleViewer)
	s.mu.Lock()
	n := len(s.m)
	s.mu.Unlock()
	if s.get(old) != nil || s.get(ids[0]) == nil || n != maxSessions {
		t.Fatalf("expired session kept or a live one ended (store %d)", n)
	}
}

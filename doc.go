// Package gmailrelay is the domain of the relay: a job (one message, named
// by its derived Message-ID), its states and the table of transitions
// between them, the lines that explain every change (a job's state is the
// fold of its lines), the invariants every stored job keeps, and the Store
// interfaces the acceptance log implements.
//
// It imports no storage library. The bbolt file (package acceptlog) and
// PostgreSQL (package pglog) implement Store; the send path (relay), the
// reconciler (sweeper) and the HTTP API (api) use it. Prepare holds the
// rules of a change that every backend shares: validation, the table, the
// stamping of lines.
package gmailrelay

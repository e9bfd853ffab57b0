package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// mailboxTokenPath is where `auth --mailbox NAME` stores a mailbox's token
// when the policy gives the mailbox no credentials path, and where serve
// looks for it. The default mailbox keeps defaultTokenPath.
func mailboxTokenPath(name string) string {
	if name == policy.DefaultMailbox {
		return defaultTokenPath()
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "gmailrelay", "token-"+name+".json")
}

// mailboxCredentials returns the credentials file and subject a mailbox's
// Gmail client uses: the policy's credentials (else the token `auth
// --mailbox` stored, else --credentials), and the policy's subject (else
// --subject for the default mailbox). "" for both: no authentication (an
// emulator or the sandbox).
func (c *serveConfig) mailboxCredentials(m policy.Mailbox) (path, subject string) {
	path, subject = m.Credentials, m.Subject
	if path == "" && m.Name != policy.DefaultMailbox && !c.Sandbox {
		if p := mailboxTokenPath(m.Name); p != "" {
			if _, err := os.Stat(p); err == nil {
				path = p
			}
		}
	}
	if path == "" {
		path = c.Credentials
	}
	if subject == "" && m.Name == policy.DefaultMailbox {
		subject = c.Subject
	}
	return path, subject
}

// policyCredentials says whether some mailbox of the policy has
// credentials of its own (then serve talks to Gmail, not the sandbox).
func (c *serveConfig) policyCredentials() bool {
	for _, m := range c.policy.MailboxList() {
		if m.Credentials != "" {
			return true
		}
	}
	return false
}

// sandboxEmulator makes the embedded emulator, serving every mailbox's
// address as an account of its own (the default mailbox without an
// address is the emulator's primary account), with the mailbox's policy
// send_as addresses as its verified aliases: the sandbox has no Gmail
// settings to read them from, so the policy stands for them.
func (c *serveConfig) sandboxEmulator(now func() time.Time) *gmailfake.Server {
	opts := gmailfake.Options{Now: now}
	for _, m := range c.policy.MailboxList() {
		if m.Address == "" {
			opts.Account = gmailfake.DefaultAccount
			continue
		}
		opts.Accounts = append(opts.Accounts, m.Address)
		for _, a := range m.SendAs {
			opts.SendAs = append(opts.SendAs, gmailfake.Alias{Account: m.Address, Address: a})
		}
	}
	return gmailfake.New(opts)
}

// mailboxSet is what serve builds per mailbox: the relay's overrides and
// the readiness probes.
type mailboxSet struct {
	configs map[string]relay.MailboxConfig
	probes  map[string]func(context.Context) error
}

// loadGmailClients reads each mailbox's credentials file (once per file)
// and builds its Gmail client (its own token source; one service account
// may serve several subjects) into c.gmail; nothing in sandbox mode. A file
// that cannot be read, or is not Google credentials of a supported type
// (authorized_user or service_account), is an error naming the flag or
// policy field it came from. It never calls Google.
func (c *serveConfig) loadGmailClients() error {
	if c.sandbox() {
		return nil
	}
	files := map[string][]byte{}
	c.gmail = map[string]*gmailapi.Client{}
	for _, m := range c.policy.MailboxList() {
		path, subject := c.mailboxCredentials(m)
		if path == "" {
			if subject != "" {
				return fmt.Errorf("mailbox %s: subject %s needs a service-account key (credentials, or --credentials)", m.Name, subject)
			}
			continue
		}
		data, ok := files[path]
		if !ok {
			var err error
			if data, err = os.ReadFile(path); err != nil {
				return fmt.Errorf("%s: %w", c.credentialsName(m, path), err)
			}
			files[path] = data
		}
		// The token source keeps this context for its refreshes: not the
		// signal's, so a send drained at shutdown can still refresh.
		gm, err := gmailapi.New(context.Background(), gmailapi.Config{Endpoint: c.GmailEndpoint, Now: c.now(),
			CredentialsJSON: data, Subject: subject})
		if err != nil {
			return fmt.Errorf("%s %s: %w", c.credentialsName(m, path), path, err)
		}
		c.gmail[m.Name] = gm
	}
	return nil
}

// credentialsName names where mailbox m's credentials path came from, for
// errors: the policy field, --credentials, or a token `gmailrelay auth`
// stored.
func (c *serveConfig) credentialsName(m policy.Mailbox, path string) string {
	switch {
	case path == m.Credentials:
		return "--policy: mailboxes." + m.Name + ".credentials"
	case path == c.Credentials && !c.storedToken:
		return "--credentials"
	}
	return "mailbox " + m.Name + ": the token gmailrelay auth stored"
}

// buildMailboxes makes one Gmail client per mailbox (the one validate
// built with its credentials, else one without authentication on base),
// its quota (sharing its Gmail pauses through a shared log) and its probe.
// wrap adds metrics to a client. A token that fails to refresh later only
// makes that mailbox not ready.
func (c *serveConfig) buildMailboxes(ctx context.Context, base gmailapi.Config, lg gmailrelay.Store,
	now func() time.Time, wrap func(relay.Provider, string) relay.Provider) (mailboxSet, error) {
	set := mailboxSet{configs: map[string]relay.MailboxConfig{}, probes: map[string]func(context.Context) error{}}
	mp, shared := lg.(gmailrelay.MailboxPauses)
	shared = shared && gmailrelay.IsShared(lg)
	for _, m := range c.policy.MailboxList() {
		gm := c.gmail[m.Name]
		if gm == nil {
			var err error
			if gm, err = gmailapi.New(ctx, base); err != nil {
				return set, fmt.Errorf("mailbox %s: %w", m.Name, err)
			}
		}
		quota := relay.NewQuota(cmp.Or(m.QuotaPerMinute, c.QuotaPerMinute), now)
		if shared {
			quota.SharePauses(mp, m.Name)
		}
		userID := m.Address
		if userID == "" {
			userID = c.Mailbox
			if c.Subject != "" && userID == "me" {
				userID = c.Subject
			}
		}
		health := func() error {
			if t := gm.TokenError(); t != "" {
				return errors.New("token refresh failing: " + t)
			}
			return nil
		}
		set.configs[m.Name] = relay.MailboxConfig{UserID: userID, Provider: wrap(gm, m.Name), Quota: quota, Health: health}
		set.probes[m.Name] = func(ctx context.Context) error {
			if err := health(); err != nil {
				return err
			}
			_, err := gm.List(ctx, userID, "rfc822msgid:<readyz@gmailrelay.invalid>", nil, "", 1)
			return err
		}
	}
	return set, nil
}

// mailboxTokenTarget returns where `auth --mailbox NAME` stores the token
// (the mailbox's credentials path in the policy, else mailboxTokenPath)
// and the address to sign in as. A name the policy does not have, or a
// mailbox served by a service account (subject), is an error naming it.
func mailboxTokenTarget(name, policyPath string) (path, address string, err error) {
	pol := policy.Default()
	if policyPath != "" {
		if pol, err = policy.Load(policyPath); err != nil {
			return "", "", fmt.Errorf("--policy: %w", err)
		}
	}
	var found *policy.Mailbox
	var names []string
	for _, m := range pol.MailboxList() {
		names = append(names, m.Name)
		if m.Name == name {
			found = &m
		}
	}
	switch {
	case found == nil && policyPath == "":
		return "", "", fmt.Errorf("--mailbox %s: give --policy, the file that names the mailboxes", name)
	case found == nil:
		return "", "", fmt.Errorf("--mailbox %s: not a mailbox of %s (mailboxes: %s)", name, policyPath, strings.Join(names, ", "))
	case found.Subject != "":
		return "", "", fmt.Errorf("--mailbox %s: it sends through a service account (subject %s); auth is for OAuth user accounts", name, found.Subject)
	}
	path = found.Credentials
	if path == "" {
		path = mailboxTokenPath(name)
	}
	return path, found.Address, nil
}

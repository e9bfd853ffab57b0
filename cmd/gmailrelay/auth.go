package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/gmailrelay/gmailrelay/gmailapi"
)

// defaultTokenPath is where `auth` stores the token and where `serve`
// looks for one when --credentials is not given.
func defaultTokenPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "gmailrelay", "token.json")
}

// authorizedUser is Google's authorized-user credentials JSON, the format
// `serve --credentials` reads (google.CredentialsFromJSON).
type authorizedUser struct {
	Type         string `json:"type"`
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	RefreshToken string `json:"refresh_token"`
}

func runAuth(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gmailrelay auth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	secret := fs.String("client-secret", "", "OAuth client JSON downloaded from Google Cloud (Desktop app)")
	out := fs.String("out", defaultTokenPath(), "where to write the token (authorized-user JSON, mode 0600); default: the mailbox's credentials path, or the config dir")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long to wait for the browser")
	mailbox := fs.String("mailbox", "", "the policy's mailbox this token is for (signs in as its address; stored where serve looks for that mailbox)")
	policyPath := fs.String("policy", os.Getenv("GMAILRELAY_POLICY"), "the policy file naming the mailboxes (with --mailbox)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	hint := ""
	if *mailbox != "" {
		outSet := false
		fs.Visit(func(f *flag.Flag) { outSet = outSet || f.Name == "out" })
		path, address, err := mailboxTokenTarget(*mailbox, *policyPath)
		if err != nil {
			fmt.Fprintf(stderr, "gmailrelay auth: %v\n", err)
			return 2
		}
		if !outSet {
			*out = path
		}
		hint = address
	}
	if *secret == "" || *out == "" {
		fmt.Fprintln(stderr, "gmailrelay auth: --client-secret is required (and --out when no config dir is known)")
		return 2
	}
	data, err := os.ReadFile(*secret)
	if err != nil {
		fmt.Fprintf(stderr, "gmailrelay auth: --client-secret: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if hint != "" {
		fmt.Fprintf(stdout, "Sign in as %s (mailbox %s).\n", hint, *mailbox)
	}
	tok, cfg, err := loopbackFlow(ctx, data, hint, func(url string) {
		fmt.Fprintf(stdout, "Open this URL in a browser on this machine and allow access:\n\n  %s\n\nWaiting for Google to redirect back...\n", url)
	})
	if err != nil {
		fmt.Fprintf(stderr, "gmailrelay auth: %v\n", err)
		return 1
	}
	if err := writeToken(*out, authorizedUser{Type: "authorized_user", ClientID: cfg.ClientID,
		ClientSecret: cfg.ClientSecret, RefreshToken: tok.RefreshToken}); err != nil {
		fmt.Fprintf(stderr, "gmailrelay auth: %v\n", err)
		return 1
	}
	if *mailbox != "" {
		fmt.Fprintf(stdout, "Token stored in %s (mode 0600). `gmailrelay serve` uses it for mailbox %s.\n", *out, *mailbox)
		return 0
	}
	fmt.Fprintf(stdout, "Token stored in %s (mode 0600). `gmailrelay serve` uses it when --credentials is not given.\n", *out)
	return 0
}

// loopbackFlow runs the OAuth installed-app flow with a loopback redirect
// on a random port, state and PKCE, and returns the token. loginHint, when
// set, is the address Google's sign-in page proposes.
func loopbackFlow(ctx context.Context, clientJSON []byte, loginHint string, show func(url string)) (*oauth2.Token, *oauth2.Config, error) {
	cfg, err := google.ConfigFromJSON(clientJSON, gmailapi.Scopes...)
	if err != nil {
		return nil, nil, fmt.Errorf("--client-secret: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("listen for the redirect: %w", err)
	}
	defer ln.Close()
	cfg.RedirectURL = "http://" + ln.Addr().String() + "/callback"
	stateBytes := make([]byte, 16)
	_, _ = rand.Read(stateBytes)
	state := hex.EncodeToString(stateBytes)
	verifier := oauth2.GenerateVerifier()

	type result struct {
		code string
		err  error
	}
	got := make(chan result, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var res result
		switch {
		case q.Get("state") != state:
			res.err = errors.New("redirect carried the wrong state; try again")
		case q.Get("error") != "":
			res.err = fmt.Errorf("google refused the consent: %s", q.Get("error"))
		case q.Get("code") == "":
			res.err = errors.New("redirect carried no code")
		default:
			res.code = q.Get("code")
		}
		if res.err != nil {
			http.Error(w, res.err.Error(), http.StatusBadRequest)
		} else {
			fmt.Fprintln(w, "gmailrelay is authorised. You can close this tab.")
		}
		select {
		case got <- res:
		default:
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		// Shutdown, not Close: the browser must still get the page the
		// handler is writing when the code arrives.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()

	opts := []oauth2.AuthCodeOption{oauth2.AccessTypeOffline, oauth2.SetAuthURLParam("prompt", "consent"), oauth2.S256ChallengeOption(verifier)}
	if loginHint != "" {
		opts = append(opts, oauth2.SetAuthURLParam("login_hint", loginHint))
	}
	show(cfg.AuthCodeURL(state, opts...))
	var res result
	select {
	case res = <-got:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("no redirect from the browser: %w", ctx.Err())
	}
	if res.err != nil {
		return nil, nil, res.err
	}
	tok, err := cfg.Exchange(ctx, res.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, nil, fmt.Errorf("exchange the code: %w", err)
	}
	if tok.RefreshToken == "" {
		return nil, nil, errors.New("no refresh token from Google; revoke the app's access at myaccount.google.com/permissions and run auth again")
	}
	return tok, cfg, nil
}

// writeToken writes the credentials with mode 0600, atomically.
func writeToken(path string, u authorizedUser) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	data, err := json.MarshalIndent(u, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".token-*")
	if err != nil {
		return fmt.Errorf("write token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write token: %w", err)
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write token: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write token: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write token: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write token %s: %w", path, err)
	}
	return nil
}

package gmailfake

import (
	"net/http"
	"net/mail"
	"strings"
)

// MethodSendAs is users.settings.sendAs.list, in faults, costs and
// Stats.Calls.
const MethodSendAs = "sendas"

// CostSendAs is users.settings.sendAs.list's quota cost.
const CostSendAs = 1

// Alias is a send-as alias of an account (Gmail's "Send mail as"):
// users.settings.sendAs.list names it, and a sent message whose From is a
// verified alias keeps it.
type Alias struct {
	// Account is the account's address; "" means the primary account.
	Account string
	// Address is the alias's address.
	Address string
	// Pending leaves the alias unverified (verificationStatus "pending"):
	// Gmail replaces a From carrying it, as it does any other.
	Pending bool
}

// sendAsJSON is Gmail's SendAs resource (the fields the emulator fills).
type sendAsJSON struct {
	SendAsEmail        string `json:"sendAsEmail"`
	IsPrimary          bool   `json:"isPrimary,omitempty"`
	IsDefault          bool   `json:"isDefault,omitempty"`
	TreatAsAlias       bool   `json:"treatAsAlias,omitempty"`
	VerificationStatus string `json:"verificationStatus,omitempty"`
}

// AddSendAs adds an alias to its account (as a user does in Gmail's
// settings), or changes an existing one's verification; an account the
// emulator does not serve is added. Later sends and sendAs.list calls see
// it.
func (s *Server) AddSendAs(al Alias) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addSendAsLocked(al)
}

func (s *Server) addSendAsLocked(al Alias) {
	a := s.accounts[0]
	if al.Account != "" {
		a = s.addAccount(al.Account)
	}
	addr := strings.TrimSpace(al.Address)
	for i, old := range a.sendAs {
		if strings.EqualFold(old.Address, addr) {
			a.sendAs[i].Pending = al.Pending
			return
		}
	}
	a.sendAs = append(a.sendAs, Alias{Account: a.addr, Address: addr, Pending: al.Pending})
}

// sendAsList serves users.settings.sendAs.list: the account's own address
// (primary, default, accepted), then its aliases in the order added.
func (s *Server) sendAsList(_ *http.Request, a *account, _ appliedFault) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := []sendAsJSON{{SendAsEmail: a.addr, IsPrimary: true, IsDefault: true, VerificationStatus: "accepted"}}
	for _, al := range a.sendAs {
		status := "accepted"
		if al.Pending {
			status = "pending"
		}
		list = append(list, sendAsJSON{SendAsEmail: al.Address, TreatAsAlias: true, VerificationStatus: status})
	}
	return struct {
		SendAs []sendAsJSON `json:"sendAs"`
	}{list}, nil
}

// keepsFromLocked reports whether a message from the From header value
// from is sent as it is by account a: from is a's address or one of its
// verified aliases. Gmail sends any other From (or none) as the account's
// address and still answers 200.
func (a *account) keepsFromLocked(from string) (name string, keep bool) {
	addr, err := mail.ParseAddress(from)
	if err != nil {
		return "", false
	}
	if strings.EqualFold(addr.Address, a.addr) {
		return addr.Name, true
	}
	for _, al := range a.sendAs {
		if !al.Pending && strings.EqualFold(addr.Address, al.Address) {
			return addr.Name, true
		}
	}
	return addr.Name, false
}

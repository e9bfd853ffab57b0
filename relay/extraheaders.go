package relay

// checkExtraHeader checks the value of an extra header of a structured
// send (Message.Headers), named canon (canonical): checkHeaderText's
// rules, and for Sender exactly one address, as a raw message's Sender
// must hold (PrepareRaw): a Sender naming two mailboxes says two different
// parties sent the message. Errors name the field headers.<canon>.
func checkExtraHeader(canon, value string) error {
	field := "headers." + canon
	if err := checkHeaderText(field, value); err != nil {
		return err
	}
	if canon != "Sender" {
		return nil
	}
	addrs, err := parseAddresses(field, []string{value})
	if err != nil {
		return err
	}
	if len(addrs) != 1 {
		return Invalid(field, "%s must hold exactly one address, not %d", field, len(addrs))
	}
	return nil
}

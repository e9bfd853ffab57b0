package gmailrelay

import "encoding/json"

// lineFields is Line without its JSON methods.
type lineFields Line

// MarshalJSON writes ln as its field tags say, but for a bounce line's
// status: the report's enhanced status code (DSNStatus, "5.1.1") under
// "status", where other lines carry Gmail's HTTP status.
func (ln Line) MarshalJSON() ([]byte, error) {
	if ln.Kind != KindBounce {
		return json.Marshal(lineFields(ln))
	}
	return json.Marshal(struct {
		lineFields
		Status string `json:"status,omitempty"`
	}{lineFields(ln), ln.DSNStatus})
}

// UnmarshalJSON reads what MarshalJSON writes: a string "status" is a
// bounce line's DSNStatus, a number Gmail's HTTP status.
func (ln *Line) UnmarshalJSON(b []byte) error {
	var aux struct {
		lineFields
		Status json.RawMessage `json:"status,omitempty"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*ln = Line(aux.lineFields)
	switch {
	case len(aux.Status) == 0 || string(aux.Status) == "null":
	case aux.Status[0] == '"':
		return json.Unmarshal(aux.Status, &ln.DSNStatus)
	default:
		return json.Unmarshal(aux.Status, &ln.Status)
	}
	return nil
}

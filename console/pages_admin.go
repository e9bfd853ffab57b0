package console

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
)

func (c *Console) faults(w http.ResponseWriter, r *http.Request, s *session) error {
	f := c.relay.Faults()
	data := map[string]any{"Enabled": f != nil, "Channels": c.relay.Channels()}
	if f != nil {
		modes := faultmodes.Modes()
		if !f.AllowCrash() {
			modes = slices.DeleteFunc(modes, func(m faultmodes.Mode) bool { return m == faultmodes.CrashAfterForward })
		}
		data["Rules"], data["Modes"] = f.List(), modes
	}
	c.render(w, r, s, http.StatusOK, "faults", data)
	return nil
}

func (c *Console) faultSet() (Faults, error) {
	f := c.relay.Faults()
	if f == nil {
		return nil, &pageError{http.StatusServiceUnavailable, "Faults disabled", "Fault modes are disabled on this relay."}
	}
	return f, nil
}

// specFromForm builds a fault rule from the add form. Blank fields are
// left out; numbers that do not parse are bad input naming the field.
func specFromForm(form map[string][]string) (faultmodes.Spec, error) {
	get := func(k string) string {
		if v := form[k]; len(v) > 0 {
			return strings.TrimSpace(v[0])
		}
		return ""
	}
	spec := faultmodes.Spec{Mode: faultmodes.Mode(get("mode")), Channel: get("channel"), Key: get("key"),
		TTL: get("ttl"), Drop: get("drop")}
	if v := get("count"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return spec, errBadInput("count: " + strconv.Quote(v) + " is not a whole number.")
		}
		spec.Count = &n
	}
	if v := get("probability"); v != "" {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return spec, errBadInput("probability: " + strconv.Quote(v) + " is not a number (0 < p ≤ 1).")
		}
		spec.Probability = &p
	}
	return spec, nil
}

func (c *Console) addFault(w http.ResponseWriter, r *http.Request, s *session) error {
	f, err := c.faultSet()
	if err != nil {
		return err
	}
	spec, err := specFromForm(r.PostForm)
	if err != nil {
		return err
	}
	if spec.Channel != "" && !slices.Contains(c.relay.Channels(), spec.Channel) {
		return errBadInput("channel: unknown channel " + strconv.Quote(spec.Channel) + ".")
	}
	rule, err := f.Add(spec)
	var fe *faultmodes.FieldError
	if errors.As(err, &fe) {
		return errBadInput(fe.Error())
	}
	if err != nil {
		return err
	}
	c.logger.Warn().Str("rule", rule.ID).Str("mode", string(rule.Mode)).Msg("fault rule added in the console")
	http.Redirect(w, r, "/ui/faults", http.StatusSeeOther)
	return nil
}

func (c *Console) removeFault(w http.ResponseWriter, r *http.Request, s *session) error {
	f, err := c.faultSet()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if !f.Remove(id) {
		return errNotFound("There is no fault rule " + strconv.Quote(id) + " (removed already?).")
	}
	c.logger.Warn().Str("rule", id).Msg("fault rule removed in the console")
	http.Redirect(w, r, "/ui/faults", http.StatusSeeOther)
	return nil
}

// logPageSize is how many lines a log page shows.
const logPageSize = 100

// logTail shows the log newest first: lines with Seq < before (default:
// all), logPageSize of them, found by seeking, never by scanning.
func (c *Console) logTail(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	st, err := c.relay.Stats(ctx)
	if err != nil {
		return err
	}
	last, err := lastSeq(ctx, c.relay, st.Lines)
	if err != nil {
		return err
	}
	before := last + 1
	if v := r.URL.Query().Get("before"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return errBadInput("before must be a line number (a positive whole number).")
		}
		before = min(n, last+1)
	}
	from := uint64(0)
	if before > logPageSize+1 {
		from = before - 1 - logPageSize
	}
	lines, _, err := c.relay.Lines(ctx, from, logPageSize)
	if err != nil {
		return err
	}
	lines = slices.DeleteFunc(lines, func(l gmailrelay.Line) bool { return l.Seq >= before })
	slices.Reverse(lines)
	type lineView struct {
		Line    gmailrelay.Line
		Details []detail
	}
	views := make([]lineView, len(lines))
	for i, l := range lines {
		views[i] = lineView{l, lineDetails(l)}
	}
	data := map[string]any{"Lines": views, "Last": last}
	if len(lines) > 0 && lines[len(lines)-1].Seq > 1 {
		data["Older"] = lines[len(lines)-1].Seq
	}
	if before <= last {
		data["Newer"] = min(before+logPageSize, last+1)
	}
	c.render(w, r, s, http.StatusOK, "log", data)
	return nil
}

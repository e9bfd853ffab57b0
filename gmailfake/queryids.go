package gmailfake

import "fmt"

// QueryMessageIDs parses q with the emulator's query parser and, when q is
// one rfc822msgid term or an OR (brace group or OR operator) of such terms,
// returns their Message-IDs (without angle brackets, in query order). Any
// other query (a parse error, a label, a date, an AND of terms) is an
// error. Tests of query builders use it to check that a built query means
// exactly "these ids, OR-ed".
func QueryMessageIDs(q string) ([]string, error) {
	n, err := parseQuery(q)
	if err != nil {
		return nil, err
	}
	var ids []string
	var walk func(queryNode) error
	walk = func(n queryNode) error {
		switch t := n.(type) {
		case msgIDTerm:
			ids = append(ids, t.id)
			return nil
		case orNode:
			for _, c := range t {
				if err := walk(c); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Errorf("%w: %T is not an rfc822msgid term or an OR of them", errQuery, n)
	}
	if err := walk(n); err != nil {
		return nil, err
	}
	return ids, nil
}

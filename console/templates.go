package console

import (
	"html/template"
	"net/url"
	"time"
)

// pageNames are the templates under templates/, each rendered inside
// layout.html.
var pageNames = []string{"login", "overview", "review", "jobs", "job", "faults", "log", "error"}

// funcs are the template helpers. None returns template.HTML: everything a
// page shows is escaped by html/template in its context.
var funcs = template.FuncMap{
	// jobURL is the console address of a job; the Message-ID is
	// path-escaped (it holds '<', '>' and may hold '/').
	"jobURL":     func(id string) string { return "/ui/jobs/" + url.PathEscape(id) },
	"pathEscape": url.PathEscape,
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"stateText": jobStateText,
	// legend is the glossary's entries for the terms a page shows,
	// rendered by the "legend" template.
	"legend": legend,
}

func parsePages() map[string]*template.Template {
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		pages[name] = template.Must(template.New(name).Funcs(funcs).
			ParseFS(templateFS, "templates/layout.html", "templates/legend.html", "templates/"+name+".html"))
	}
	return pages
}

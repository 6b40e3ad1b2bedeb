package report

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"io"
	"strconv"
	"strings"
	texttemplate "text/template"
	"time"
)

// Formats are the formats Write writes.
var Formats = []string{"md", "html", "json"}

// Write writes r in a format.
func Write(w io.Writer, r *Report, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "html":
		return reportHTML.Execute(w, r)
	}
	return reportMD.Execute(w, r)
}

var reportFuncs = template.FuncMap{
	"pct": func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) + " %" },
	"ms":  func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + " ms" },
	"t":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	"ts":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"join": func(s []string) string {
		if len(s) == 0 {
			return "—"
		}
		return strings.Join(s, ", ")
	},
	// md escapes what would break a Markdown table cell.
	"md": func(s string) string {
		return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;", "`", "\\`", "*", `\*`, "[", `\[`, "]", `\]`).Replace(s)
	},
}

// mdTemplate parses the Markdown report with text/template: html/template
// would escape it as HTML. The md func escapes what comes from records.
func mdTemplate(text string) *texttemplate.Template {
	return texttemplate.Must(texttemplate.New("md").Funcs(texttemplate.FuncMap(reportFuncs)).Parse(text))
}

var reportMD = mdTemplate(`# SLA report {{t .From}} — {{t .Until}}{{if .Filter}} ({{md .Filter}}){{end}}

{{.Rule}}. Target: {{pct .Target}} per window.
{{range .Notes}}
> {{md .}}
{{end}}{{if .Note}}
**{{md .Note}}**
{{else}}
Records: {{.Records}} API-minutes from {{.Nodes}} node(s).

## Summary

| calls | succeeded | gateway failures | backend failures | refused | availability | windows below target | worst window | p50 | p90 | p99 | p99.9 | breakers opened |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{{with .Total}}| {{.Calls}} | {{.Succeeded}} | {{.GatewayFailed}} | {{.BackendFailed}} | {{.Refused}} | {{pct .Availability}} | {{.WindowsBelow}} of {{.Windows}} | {{with .WorstWindow}}{{pct .Availability}} at {{t .Start}}{{else}}—{{end}} | {{ms .P50}} | {{ms .P90}} | {{ms .P99}} | {{ms .P999}} | {{.BreakersOpened}} |{{end}}

## By owner

| owner | APIs | calls | availability | windows below target | worst window | p99 | breakers opened |
|---|---|---:|---:|---:|---:|---:|---:|
{{range .Owners}}| {{md .Owner}} | {{md (join .APIs)}} | {{.Calls}} | {{pct .Availability}} | {{.WindowsBelow}} of {{.Windows}} | {{with .WorstWindow}}{{pct .Availability}} at {{t .Start}}{{else}}—{{end}} | {{ms .P99}} | {{.BreakersOpened}} |
{{end}}
## By API

| API | owner | calls | succeeded | gateway failures | backend failures | refused | availability | windows below target | p50 | p90 | p99 | p99.9 | breakers opened | changed on |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|
{{range .APIs}}| {{md .API}} | {{md .Owner}} | {{.Calls}} | {{.Succeeded}} | {{.GatewayFailed}} | {{.BackendFailed}} | {{.Refused}} | {{pct .Availability}} | {{.WindowsBelow}} of {{.Windows}} | {{ms .P50}} | {{ms .P90}} | {{ms .P99}} | {{ms .P999}} | {{.BreakersOpened}} | {{join .Changed}} |
{{end}}
## Slowest APIs (p99 over the period)

| API | owner | p99 | p99.9 | calls |
|---|---|---:|---:|---:|
{{range .Slowest}}| {{md .API}} | {{md .Owner}} | {{ms .P99}} | {{ms .P999}} | {{.Calls}} |
{{end}}
## Windows below {{pct .Target}}

{{if .Below}}| window (5 min) | API | owner | calls counted | succeeded | availability |
|---|---|---|---:|---:|---:|
{{range .Below}}| {{t .Start}} | {{md .API}} | {{md .Owner}} | {{.Calls}} | {{.Succeeded}} | {{pct .Availability}} |
{{end}}{{else}}None.
{{end}}
## Errors by code

{{if .Errors}}| API | code | kind | whose | calls |
|---|---|---|---|---:|
{{range .Errors}}| {{md .API}} | {{md .Code}} | {{.Kind}} | {{.Cause}} | {{.Count}} |
{{end}}{{else}}None.
{{end}}{{end}}
## Breakers opened

{{if .Breakers}}| at | API | owner | worker | reason |
|---|---|---|---|---|
{{range .Breakers}}| {{ts .At}} | {{md .API}} | {{md .Owner}} | {{md .Worker}} | {{md .Reason}} |
{{end}}{{else}}None.
{{end}}
## Switches flipped

{{if .Switches}}| at | switch | on/off | API | owner | by |
|---|---|---|---|---|---|
{{range .Switches}}| {{ts .At}} | {{.Kind}} | {{.Action}} | {{md .API}} | {{md .Owner}} | {{md .Actor}} |
{{end}}{{else}}None.
{{end}}
## Registry changes

{{if .Changes}}| at | action | API | owner | by |
|---|---|---|---|---|
{{range .Changes}}| {{ts .At}} | {{.Action}} | {{md .API}} | {{md .Owner}} | {{md .Actor}} |
{{end}}{{else}}None.
{{end}}`)

var reportHTML = template.Must(template.New("html").Funcs(reportFuncs).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>SLA report {{t .From}} — {{t .Until}}</title>
<style>` + htmlStyle + `</style></head><body>
<h1>SLA report {{t .From}} — {{t .Until}}{{if .Filter}} ({{.Filter}}){{end}}</h1>
<p>{{.Rule}}. Target: {{pct .Target}} per window.</p>
{{range .Notes}}<p class="note">{{.}}</p>{{end}}
{{if .Note}}<p class="note"><strong>{{.Note}}</strong></p>{{else}}
<p>Records: {{.Records}} API-minutes from {{.Nodes}} node(s).</p>
<h2>Summary</h2>
<table><tr><th>calls</th><th>succeeded</th><th>gateway failures</th><th>backend failures</th><th>refused</th><th>availability</th><th>windows below target</th><th>worst window</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>breakers opened</th></tr>
{{with .Total}}<tr><td class="n">{{.Calls}}</td><td class="n">{{.Succeeded}}</td><td class="n">{{.GatewayFailed}}</td><td class="n">{{.BackendFailed}}</td><td class="n">{{.Refused}}</td><td class="n">{{pct .Availability}}</td><td class="n">{{.WindowsBelow}} of {{.Windows}}</td><td>{{with .WorstWindow}}{{pct .Availability}} at {{t .Start}}{{else}}—{{end}}</td><td class="n">{{ms .P50}}</td><td class="n">{{ms .P90}}</td><td class="n">{{ms .P99}}</td><td class="n">{{ms .P999}}</td><td class="n">{{.BreakersOpened}}</td></tr>{{end}}
</table>
<h2>By owner</h2>
<table><tr><th>owner</th><th>APIs</th><th>calls</th><th>availability</th><th>windows below target</th><th>worst window</th><th>p99</th><th>breakers opened</th></tr>
{{range .Owners}}<tr><td>{{.Owner}}</td><td>{{join .APIs}}</td><td class="n">{{.Calls}}</td><td class="n{{if .WindowsBelow}} bad{{end}}">{{pct .Availability}}</td><td class="n">{{.WindowsBelow}} of {{.Windows}}</td><td>{{with .WorstWindow}}{{pct .Availability}} at {{t .Start}}{{else}}—{{end}}</td><td class="n">{{ms .P99}}</td><td class="n">{{.BreakersOpened}}</td></tr>
{{end}}</table>
<h2>By API</h2>
<table><tr><th>API</th><th>owner</th><th>calls</th><th>succeeded</th><th>gateway failures</th><th>backend failures</th><th>refused</th><th>availability</th><th>windows below target</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>breakers opened</th><th>changed on</th></tr>
{{range .APIs}}<tr><td>{{.API}}</td><td>{{.Owner}}</td><td class="n">{{.Calls}}</td><td class="n">{{.Succeeded}}</td><td class="n">{{.GatewayFailed}}</td><td class="n">{{.BackendFailed}}</td><td class="n">{{.Refused}}</td><td class="n{{if .WindowsBelow}} bad{{end}}">{{pct .Availability}}</td><td class="n">{{.WindowsBelow}} of {{.Windows}}</td><td class="n">{{ms .P50}}</td><td class="n">{{ms .P90}}</td><td class="n">{{ms .P99}}</td><td class="n">{{ms .P999}}</td><td class="n">{{.BreakersOpened}}</td><td>{{join .Changed}}</td></tr>
{{end}}</table>
<h2>Slowest APIs (p99 over the period)</h2>
<table><tr><th>API</th><th>owner</th><th>p99</th><th>p99.9</th><th>calls</th></tr>
{{range .Slowest}}<tr><td>{{.API}}</td><td>{{.Owner}}</td><td class="n">{{ms .P99}}</td><td class="n">{{ms .P999}}</td><td class="n">{{.Calls}}</td></tr>
{{end}}</table>
<h2>Windows below {{pct .Target}}</h2>
{{if .Below}}<table><tr><th>window (5 min)</th><th>API</th><th>owner</th><th>calls counted</th><th>succeeded</th><th>availability</th></tr>
{{range .Below}}<tr><td>{{t .Start}}</td><td>{{.API}}</td><td>{{.Owner}}</td><td class="n">{{.Calls}}</td><td class="n">{{.Succeeded}}</td><td class="n bad">{{pct .Availability}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
<h2>Errors by code</h2>
{{if .Errors}}<table><tr><th>API</th><th>code</th><th>kind</th><th>whose</th><th>calls</th></tr>
{{range .Errors}}<tr><td>{{.API}}</td><td>{{.Code}}</td><td>{{.Kind}}</td><td>{{.Cause}}</td><td class="n">{{.Count}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
{{end}}
<h2>Breakers opened</h2>
{{if .Breakers}}<table><tr><th>at</th><th>API</th><th>owner</th><th>worker</th><th>reason</th></tr>
{{range .Breakers}}<tr><td>{{ts .At}}</td><td>{{.API}}</td><td>{{.Owner}}</td><td>{{.Worker}}</td><td>{{.Reason}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
<h2>Switches flipped</h2>
{{if .Switches}}<table><tr><th>at</th><th>switch</th><th>on/off</th><th>API</th><th>owner</th><th>by</th></tr>
{{range .Switches}}<tr><td>{{ts .At}}</td><td>{{.Kind}}</td><td>{{.Action}}</td><td>{{.API}}</td><td>{{.Owner}}</td><td>{{.Actor}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
<h2>Registry changes</h2>
{{if .Changes}}<table><tr><th>at</th><th>action</th><th>API</th><th>owner</th><th>by</th></tr>
{{range .Changes}}<tr><td>{{ts .At}}</td><td>{{.Action}}</td><td>{{.API}}</td><td>{{.Owner}}</td><td>{{.Actor}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
<p><small>Generated {{ts .Generated}} by jetway report.</small></p>
</body></html>
`))

// htmlStyle is the HTML report's one style sheet, inline so the page
// stands alone; HTMLStyleHash allows it, and it alone, in a
// Content-Security-Policy (style-src 'sha256-…').
const htmlStyle = `
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f3f3f3}
.bad{color:#b00020;font-weight:600}
.note{padding:.6em 1em;background:#fff4e5;border-left:4px solid #f0a000}
`

// HTMLStyleHash is the CSP source of the HTML report's style sheet.
var HTMLStyleHash = func() string {
	sum := sha256.Sum256([]byte(htmlStyle))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

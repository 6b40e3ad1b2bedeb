package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/push/pushclient"
)

// browser starts headless Chromium (Debian's chromium, or CHROMIUM) for a
// test. Without one the test is skipped, unless JETWAY_E2E_BROWSER=require
// (as .ci/run sets it, having installed it): then it fails.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		for _, p := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if lp, err := exec.LookPath(p); err == nil {
				path = lp
				break
			}
		}
	}
	if path == "" {
		if os.Getenv("JETWAY_E2E_BROWSER") == "require" {
			t.Fatal("no chromium found, and JETWAY_E2E_BROWSER=require")
		}
		t.Skip("no chromium on PATH (apt-get install chromium): the console's browser tests are skipped")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// run runs browser steps within a deadline.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs one browser action that answers a value, within a deadline.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// css is a CSS selector.
func css(s string) chromedp.CSS { return chromedp.CSS(s) }

// screenshot saves the page as docs/console-NAME.png when
// JETWAY_CONSOLE_SCREENSHOTS names a folder (the docs' pictures are made
// so: JETWAY_CONSOLE_SCREENSHOTS=$PWD/docs go test -run Console ./e2e/).
func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("JETWAY_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, "console-"+name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConsole drives the console in a real browser against a real
// jetway serve: the login and nothing else without a token, the live
// chart moving while traffic runs, a degrade switch flipped from the
// console changing the edge's answer, an XSS payload shown as text, a
// save that lost a race showing who won and the diff, an entry the schema
// refuses stopped in the browser, an app's key shown once, and a job's
// dead letter listed and replayed.
func TestConsole(t *testing.T) {
	ctx := browser(t)
	srv := startNode(t, "serve", "serve", "", "--demo")
	srv.waitLog(t, startTimeout, `"demo ready"`, func(l logLine) bool { return strings.HasPrefix(l.str("msg"), "demo ready") })
	srv.waitReady(t)
	tok, err := os.ReadFile(filepath.Join(srv.data, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	console := srv.admin + "/console/"

	t.Run("without a token, the login and nothing else", func(t *testing.T) {
		run(t, ctx, "open", chromedp.Navigate(console), chromedp.WaitVisible(css("#login")))
		barHidden := value(t, ctx, "bar", chromedp.Evaluate[bool](`getComputedStyle(document.getElementById('bar')).display === 'none'`))
		mainText := value(t, ctx, "page", chromedp.Text(css("#main")))
		if !barHidden || strings.Contains(mainText, "demo.hello") {
			t.Fatalf("bar hidden %v, page %q", barHidden, mainText)
		}
		screenshot(t, ctx, "login")
		run(t, ctx, "a wrong token", chromedp.SendKeys(css("#token"), "not-the-token"), chromedp.Click(css("#signin")))
		waitJS(t, ctx, "the refusal", `document.getElementById('login-error').textContent.includes('refused')`)
	})

	// Traffic for the live charts.
	stop := make(chan struct{})
	var calls atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if r, err := http.Get(srv.edge + "/v1/hello/console"); err == nil {
				r.Body.Close()
				calls.Add(1)
			}
		}
	}()
	t.Cleanup(func() { close(stop) })

	t.Run("signed in, the cluster and its live chart", func(t *testing.T) {
		run(t, ctx, "sign in", chromedp.Navigate(console), chromedp.WaitVisible(css("#login")),
			chromedp.SendKeys(css("#token"), token), chromedp.Click(css("#signin")), chromedp.WaitVisible(css("#cluster-chart")))
		if text := value(t, ctx, "read", chromedp.Text(css("#main"))); !strings.Contains(text, "demo.hello") {
			t.Fatalf("the cluster screen lists no demo.hello:\n%s", text)
		}
		waitJS(t, ctx, "the chart to have points with calls", `(() => { const c = document.getElementById('cluster-chart');
			return Number(c.dataset.points) >= 2 && Number((c.dataset.last || '0').split(',')[0]) > 0; })()`)
		// Breakers open and alerts firing come from the nodes' beats: a
		// worker's of its breakers, the judging node's of its alerts.
		nc := natsConn(t, srv.natsURL)
		worker, _ := json.Marshal(bus.Heartbeat{ID: "consoleworker", Role: "worker", Pools: []string{"demo"}, Started: time.Now(), At: time.Now(),
			Breakers: []string{"demo.hello"}})
		judge, _ := json.Marshal(bus.Heartbeat{ID: "consoleedge", Role: "edge", Started: time.Now(), At: time.Now(), Alerts: []string{"slow demo.hello"}})
		for range 3 {
			if err := nc.Publish(bus.HeartbeatSubject("worker", "consoleworker"), worker); err != nil {
				t.Fatal(err)
			}
			if err := nc.Publish(bus.HeartbeatSubject("edge", "consoleedge"), judge); err != nil {
				t.Fatal(err)
			}
		}
		waitJS(t, ctx, "the breaker and the alert", `document.getElementById('breakers-open').textContent === '1' &&
			document.getElementById('alerts-firing').textContent === '1' &&
			document.getElementById('health-list').textContent.includes('breaker open: demo.hello')`)
		tagged := value(t, ctx, "tags", chromedp.Evaluate[int](`[...document.querySelectorAll('#main td .tag')].filter(e => e.textContent === 'breaker open' && e.offsetParent !== null).length`))
		if tagged != 1 {
			t.Errorf("%d rows show a breaker open, want 1 (demo.hello)", tagged)
		}
		first := value(t, ctx, "points", chromedp.Evaluate[string](`document.getElementById('cluster-chart').dataset.points`))
		waitJS(t, ctx, "the chart to move on", fmt.Sprintf(`Number(document.getElementById('cluster-chart').dataset.points) > %s`, first))
		screenshot(t, ctx, "cluster")
	})

	t.Run("a degrade switch flipped from the console", func(t *testing.T) {
		openAPI(t, ctx, console, "demo.hello")
		waitJS(t, ctx, "the API's chart to have points", `Number(document.getElementById('api-chart').dataset.points) >= 3`)
		screenshot(t, ctx, "api")
		run(t, ctx, "degrade", chromedp.Click(css("#degrade-toggle")))
		waitJS(t, ctx, "the switch on", `document.getElementById('degrade-status') && document.getElementById('degrade-status').textContent === 'degraded'`)
		waitStatus(t, srv.edge+"/v1/hello/x", http.StatusServiceUnavailable)
		run(t, ctx, "restore", chromedp.Click(css("#degrade-toggle")))
		waitJS(t, ctx, "the switch off", `document.getElementById('degrade-status') && document.getElementById('degrade-status').textContent === 'serving'`)
		waitStatus(t, srv.edge+"/v1/hello/x", http.StatusOK)
	})

	t.Run("a fault drill started and ended from the console", func(t *testing.T) {
		openAPI(t, ctx, console, "demo.hello")
		run(t, ctx, "start a drill", chromedp.SetValue(css("#fault-value"), "418"), chromedp.Click(css("#fault-start")))
		waitJS(t, ctx, "the drill on", `!!document.getElementById('fault-end')`)
		waitStatus(t, srv.edge+"/v1/hello/x", http.StatusTeapot)
		run(t, ctx, "end it", chromedp.Click(css("#fault-end")))
		waitJS(t, ctx, "the drill over", `!!document.getElementById('fault-status') && document.getElementById('fault-status').textContent === 'none'`)
		waitStatus(t, srv.edge+"/v1/hello/x", http.StatusOK)
	})

	t.Run("a fault drill of the calls with a header only", func(t *testing.T) {
		openAPI(t, ctx, console, "demo.hello")
		run(t, ctx, "start a drill with a filter", chromedp.SetValue(css("#fault-value"), "418"), chromedp.SetValue(css("#fault-headers"), "X-Drill: on"), chromedp.Click(css("#fault-start")))
		waitJS(t, ctx, "the drill on", `!!document.getElementById('fault-end') && document.getElementById('fault-status').textContent.includes('headers X-Drill: on')`)
		natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
			with, err1 := do("GET", srv.edge+"/v1/hello/x", nil, http.Header{"X-Drill": {"on"}})
			without, err2 := do("GET", srv.edge+"/v1/hello/x", nil, nil)
			if err1 != nil || err2 != nil || with.status != http.StatusTeapot || without.status != http.StatusOK {
				return fmt.Errorf("with the header %v %v, without %v %v", with.status, err1, without.status, err2)
			}
			return nil
		})
		run(t, ctx, "end it", chromedp.Click(css("#fault-end")))
		waitJS(t, ctx, "the drill over", `!!document.getElementById('fault-status') && document.getElementById('fault-status').textContent === 'none'`)
	})

	t.Run("a channel set listed, its release started and a channel cut from the console", func(t *testing.T) {
		doc := `{"name":"e2e.channels","pool":"e2e","route":{"method":"GET","path":"/v1/e2e-channels"},
			"channels":[{"name":"carrier-a","weight":3,"backend":{"type":"mock","body":"a"}},{"name":"carrier-b","backend":{"type":"mock","body":"b"}}],
			"release":{"canary":"carrier-b","steps":[10,50]}}`
		if res := jetway(t, doc, "api", "put", "-", "--nats", srv.natsURL); res.code != 0 {
			t.Fatalf("api put: %s", res.stderr)
		}
		openAPI(t, ctx, console, "e2e.channels")
		row := `#channels tr[data-channel="carrier-b"]`
		waitJS(t, ctx, "the channels", fmt.Sprintf(`!!document.querySelector(%q) && document.querySelector(%q).textContent === '–'`, row, row+" td.override"))
		waitJS(t, ctx, "the release pending", `document.getElementById('release-stage').textContent === 'pending'`)
		run(t, ctx, "start the release", chromedp.Click(css("#release-start")))
		waitJS(t, ctx, "the release at its first step", `document.getElementById('release-stage').textContent === 'running' && document.getElementById('release-percent').textContent === '10 %'`)
		run(t, ctx, "cut", chromedp.Click(css(row+" button.channel-cut")))
		waitJS(t, ctx, "the override and the controller's cut", fmt.Sprintf(`document.querySelector(%q).textContent.startsWith('cut by ') &&
			document.querySelector(%q).textContent === 'cut'`, row+" td.override", row+" td .tag"))
		screenshot(t, ctx, "channels")
	})

	t.Run("an XSS payload in a description is text", func(t *testing.T) {
		payload := `<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>`
		doc := fmt.Sprintf(`{"name":"e2e.xss","pool":"e2e","description":%q,"route":{"method":"GET","path":"/v1/xss"},"backend":{"type":"mock","json":{}}}`, payload)
		if res := jetway(t, doc, "api", "put", "-", "--nats", srv.natsURL); res.code != 0 {
			t.Fatalf("api put: %s", res.stderr)
		}
		openAPI(t, ctx, console, "e2e.xss")
		run(t, ctx, "settle", chromedp.Sleep(200*time.Millisecond))
		desc := value(t, ctx, "description", chromedp.TextContent(css("#description")))
		tags := value(t, ctx, "elements", chromedp.Evaluate[int](`document.querySelectorAll('#main img, #main script').length`))
		xss := value(t, ctx, "window.__xss", chromedp.Evaluate[bool](`window.__xss !== undefined`))
		if desc != payload || tags != 0 || xss {
			t.Fatalf("description %q, %d img/script elements, the payload ran: %v", desc, tags, xss)
		}
	})

	t.Run("a save that lost a race says who won, with the diff", func(t *testing.T) {
		openAPI(t, ctx, console, "demo.mock")
		entry := value(t, ctx, "the editor", chromedp.Value(css("#entry")))
		// A colleague saves first, through the CLI.
		withDescription := func(d string) string {
			var m map[string]any
			if err := json.Unmarshal([]byte(entry), &m); err != nil {
				t.Fatalf("the editor holds no JSON: %v\n%s", err, entry)
			}
			m["description"] = d
			b, _ := json.MarshalIndent(m, "", "  ")
			return string(b)
		}
		if res := jetway(t, withDescription("the colleague's"), "api", "put", "-", "--nats", srv.natsURL); res.code != 0 {
			t.Fatalf("the colleague's put: %s", res.stderr)
		}
		mine := withDescription("mine")
		run(t, ctx, "save mine", chromedp.SetValue(css("#entry"), mine), chromedp.Click(css("#save")), chromedp.WaitVisible(css("#conflict-message")))
		msg := value(t, ctx, "message", chromedp.TextContent(css("#conflict-message")))
		diff := value(t, ctx, "diff", chromedp.TextContent(css("#conflict-diff")))
		if !strings.Contains(msg, "changed this API first") || strings.Contains(msg, "someone") {
			t.Errorf("conflict message %q", msg)
		}
		if !strings.Contains(diff, `"the colleague's"`) || !strings.Contains(diff, `"mine"`) {
			t.Errorf("diff:\n%s", diff)
		}
		screenshot(t, ctx, "conflict")
		// An entry the schema refuses is stopped in the browser.
		run(t, ctx, "an invalid entry", chromedp.SetValue(css("#entry"), strings.Replace(mine, `"description": "mine"`, `"description": "mine", "no_such_field": 1`, 1)),
			chromedp.Click(css("#save")), chromedp.WaitVisible(css("#problems")))
		if problems := value(t, ctx, "problems", chromedp.TextContent(css("#problems"))); !strings.Contains(problems, "no_such_field") {
			t.Errorf("schema problems %q", problems)
		}
	})

	t.Run("apps, nodes and the audit trail", func(t *testing.T) {
		run(t, ctx, "make an app", chromedp.Navigate(console+"#/apps"), chromedp.WaitVisible(css("#app-id")),
			chromedp.SendKeys(css("#app-id"), "console-app"), chromedp.SendKeys(css("#app-apis"), "demo.*"), chromedp.Click(css("#app-create")),
			chromedp.WaitVisible(css("#new-key")))
		key := value(t, ctx, "the key", chromedp.TextContent(css("#new-key")))
		if key == "" {
			t.Fatal("no key shown")
		}
		screenshot(t, ctx, "apps")
		run(t, ctx, "nodes", chromedp.Navigate(console+"#/nodes"))
		waitJS(t, ctx, "the nodes", `document.querySelector('h1').textContent === 'Nodes' && !!document.querySelector('table')`)
		nodes := value(t, ctx, "nodes", chromedp.TextContent(css("#main")))
		run(t, ctx, "audit", chromedp.Navigate(console+"#/audit"))
		waitJS(t, ctx, "the trail", `document.querySelector('h1').textContent === 'Audit trail' && !!document.querySelector('table')`)
		trail := value(t, ctx, "audit", chromedp.TextContent(css("#main")))
		if !strings.Contains(nodes, "serve") || !strings.Contains(trail, "console-app") || !strings.Contains(trail, "e2e.xss") {
			t.Errorf("nodes:\n%s\naudit:\n%s", nodes, trail)
		}
	})
	t.Run("push: a topic put, every edge's counters and connections, a kick", func(t *testing.T) {
		demo := srv.waitLog(t, startTimeout, `"demo push"`, func(l logLine) bool { return strings.HasPrefix(l.str("msg"), "demo push") })
		c, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: srv.edge, Topic: "demo.news", Transport: "sse", Header: http.Header{"X-Api-Key": {demo.str("reader_key")}}, Device: "console-phone"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		run(t, ctx, "push", chromedp.Navigate(console+"#/push"), chromedp.WaitVisible(css("#topic-entry")))
		waitJS(t, ctx, "the edge and the connection", `document.querySelector('button.kick[data-app="demo-reader"]') !== null && document.querySelectorAll('#push-edges td.num').length > 0`)
		text := value(t, ctx, "push", chromedp.TextContent(css("#main")))
		if !strings.Contains(text, "demo.news") || !strings.Contains(text, "console-phone") {
			t.Fatalf("the push screen:\n%s", text)
		}
		run(t, ctx, "put a topic", chromedp.SetValue(css("#topic-entry"), `{"name":"console.alerts","subscribe":["*"],"mode":"latest_only"}`), chromedp.Click(css("#topic-save")))
		waitJS(t, ctx, "the new topic", `document.getElementById('main').textContent.includes('console.alerts') && document.getElementById('main').textContent.includes('latest_only')`)
		run(t, ctx, "a bad topic", chromedp.SetValue(css("#topic-entry"), `{"name":"console.bad","mode":"sometimes"}`), chromedp.Click(css("#topic-save")))
		waitJS(t, ctx, "the refusal", `!!document.getElementById('topic-error') && document.getElementById('topic-error').textContent.includes('INVALID_ENTRY')`)
		screenshot(t, ctx, "push")
		run(t, ctx, "kick (asked, then confirmed)", chromedp.Click(css(`button.kick[data-app="demo-reader"]`)))
		waitJS(t, ctx, "the question", `document.querySelector('button.kick[data-app="demo-reader"]').textContent.includes('end all of demo-reader?')`)
		if none := value(t, ctx, "no kick yet", chromedp.Evaluate[bool](`!document.getElementById("kicked")`)); !none {
			t.Fatal("one click kicked")
		}
		run(t, ctx, "confirm the kick", chromedp.Click(css(`button.kick[data-app="demo-reader"]`)))
		waitJS(t, ctx, "the kick's answer", `!!document.getElementById('kicked') && document.getElementById('kicked').textContent.includes('Ended 1 connection')`)
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			ev, err := c.Next(kctx)
			if err != nil {
				t.Fatalf("no close after the kick: %v", err)
			}
			if ev.Type == "close" {
				break
			}
		}
	})
	t.Run("jobs: the queues and a dead letter, replayed", func(t *testing.T) {
		doc := `{"name":"e2e.jobs","pool":"e2e","route":{"method":"POST","path":"/v1/e2e-jobs"},"backend":{"type":"mock","status":503,"body":"down"},"async":{"attempts":1}}`
		if res := jetway(t, doc, "api", "put", "-", "--nats", srv.natsURL); res.code != 0 {
			t.Fatalf("api put: %s", res.stderr)
		}
		var job string
		natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error { // the edge has the API
			r, err := do("POST", srv.edge+"/v1/e2e-jobs", strings.NewReader("report"), http.Header{"Prefer": {"respond-async"}})
			if err != nil || r.status != http.StatusAccepted {
				return fmt.Errorf("submit: %v %v", r, err)
			}
			job = strings.TrimPrefix(r.header.Get("Location"), "/_jetway/jobs/")
			return nil
		})
		run(t, ctx, "jobs", chromedp.Navigate(console+"#/"), chromedp.WaitVisible(css("#cluster-chart")), chromedp.Click(css(`#bar a[href="#/jobs"]`)), chromedp.WaitVisible(css("#dead-letters")))
		row := fmt.Sprintf(`#dead-letters tr[data-job=%q]`, job)
		waitJS(t, ctx, "the dead letter", fmt.Sprintf(`!!document.querySelector(%q) && document.querySelector('#job-queues').textContent.includes('e2e.jobs')`, row))
		text := value(t, ctx, "the row", chromedp.TextContent(css(row)))
		if !strings.Contains(text, "e2e.jobs") || !strings.Contains(text, "retries_exhausted") || !strings.Contains(text, "503") {
			t.Errorf("the dead letter's row: %q", text)
		}
		screenshot(t, ctx, "jobs")
		run(t, ctx, "replay", chromedp.Click(css(row+" button.replay")))
		waitJS(t, ctx, "the replay's answer", fmt.Sprintf(`!!document.getElementById('replayed') && document.getElementById('replayed').textContent.includes(%q)`, job))
		run(t, ctx, "the job's status", chromedp.SetValue(css("#job-id"), "/_jetway/jobs/"+job), chromedp.Click(css("#job-lookup")))
		waitJS(t, ctx, "the status", fmt.Sprintf(`!!document.getElementById('job-status-json') && document.getElementById('job-status-json').textContent.includes(%q)`, job))
		// The replayed job fails again: a dead letter to purge.
		natstest.CheckFor(t, 15*time.Second, 100*time.Millisecond, func() error {
			if b := restGet(t, srv.admin+"/v1/deadletters?api=e2e.jobs", token); !strings.Contains(b, job) {
				return fmt.Errorf("the replayed job is no dead letter yet: %s", b)
			}
			return nil
		})
		run(t, ctx, "purge (asked)", chromedp.SetValue(css("#purge-api"), "e2e.jobs"), chromedp.Click(css("#purge")))
		waitJS(t, ctx, "the question", `document.getElementById('purge').textContent.includes('Click again') && !document.getElementById('purged')`)
		run(t, ctx, "purge (confirmed)", chromedp.Click(css("#purge")))
		waitJS(t, ctx, "the purge's answer", `!!document.getElementById('purged') && /Removed [1-9]/.test(document.getElementById('purged').textContent)`)
		trail := restGet(t, srv.admin+"/v1/audit?kind=dlq", token)
		if !strings.Contains(trail, `"purge"`) {
			t.Errorf("no purge in the audit trail: %s", trail)
		}
	})
	t.Run("alerts: a rule put and edited from the console, seen over REST", func(t *testing.T) {
		run(t, ctx, "alerts", chromedp.Navigate(console+"#/alerts"), chromedp.WaitVisible(css("#alert-entry")))
		run(t, ctx, "put a rule", chromedp.SetValue(css("#alert-entry"), `{"name":"console-slow","kind":"p99_above","api":"demo.hello","latency":"800ms"}`), chromedp.Click(css("#alert-save")))
		waitJS(t, ctx, "the rule listed", `!!document.querySelector('tr[data-alert="console-slow"]')`)
		run(t, ctx, "edit it", chromedp.Click(css(`tr[data-alert="console-slow"] button.alert-edit`)))
		entry := value(t, ctx, "the editor", chromedp.Value(css("#alert-entry")))
		run(t, ctx, "save it", chromedp.SetValue(css("#alert-entry"), strings.Replace(entry, "800ms", "1.5s", 1)), chromedp.Click(css("#alert-save")))
		waitJS(t, ctx, "the change listed", `!!document.querySelector('tr[data-alert="console-slow"]') && document.querySelector('tr[data-alert="console-slow"]').textContent.includes('1.5s')`)
		if rules := restGet(t, srv.admin+"/v1/alerts", token); !strings.Contains(rules, `"console-slow"`) || !strings.Contains(rules, `"1.5s"`) {
			t.Errorf("the rule over REST: %s", rules)
		}
		screenshot(t, ctx, "alerts")
	})
	t.Run("reports: the report of the demo's traffic, its HTML page and a schedule", func(t *testing.T) {
		// The edge stores a minute's records when it ends: wait for one
		// with the demo's traffic (the traffic has run since the start).
		natstest.CheckFor(t, 75*time.Second, time.Second, func() error {
			var rep struct{ Total struct{ Calls int64 } }
			if b := restGet(t, srv.admin+"/v1/reports?since=1h&api=demo.hello", token); json.Unmarshal([]byte(b), &rep) != nil || rep.Total.Calls == 0 {
				return fmt.Errorf("no calls of demo.hello stored yet: %.300s", b)
			}
			return nil
		})
		doc := `{"owner":"Team Console","every":"daily","at":"06:00","webhook":{"url":"https://hooks.example.com/t/s3cr3t?key=k3y"}}`
		if r, err := do("PUT", srv.admin+"/v1/reports/schedules/Team%20Console", strings.NewReader(doc),
			http.Header{"Authorization": {"Bearer " + token}, "If-None-Match": {"*"}}); err != nil || r.status != http.StatusOK {
			t.Fatalf("put a schedule: %v %v", r, err)
		}
		run(t, ctx, "reports", chromedp.Navigate(console+"#/reports"), chromedp.WaitVisible(css("#report-since")))
		waitJS(t, ctx, "the report", `!!document.getElementById('report-summary') && !!document.getElementById('report-period')`)
		run(t, ctx, "demo.hello's", chromedp.SetValue(css("#report-since"), "1h"), chromedp.SetValue(css("#report-api"), "demo.hello"), chromedp.Click(css("#report-show")))
		waitJS(t, ctx, "demo.hello's row with calls", `!!document.querySelector('#report-apis tr[data-api="demo.hello"]') &&
			Number(document.querySelector('#report-apis tr[data-api="demo.hello"] td.num').textContent) > 0 &&
			document.getElementById('report-period').textContent.includes('(api demo.hello)')`)
		schedules := value(t, ctx, "schedules", chromedp.TextContent(css("#main")))
		if !strings.Contains(schedules, "Team Console") || !strings.Contains(schedules, "https://hooks.example.com/…") || strings.Contains(schedules, "s3cr3t") || strings.Contains(schedules, "k3y") {
			t.Errorf("the schedules:\n%s", schedules)
		}
		screenshot(t, ctx, "reports")
		value(t, ctx, "watch the blobs", chromedp.Evaluate[bool](`(() => { window.__blobTypes = []; const f = URL.createObjectURL;
			URL.createObjectURL = b => { window.__blobTypes.push(b.type); return f(b); }; return true; })()`))
		run(t, ctx, "download the HTML report", chromedp.Click(css("#report-download")))
		waitJS(t, ctx, "the download", `!!document.getElementById('report-downloaded')`)
		// The page is saved as bytes: a blob: URL of text/html would be of
		// the console's origin, and render without the report's policy.
		if types := value(t, ctx, "blob types", chromedp.Evaluate[[]string](`window.__blobTypes`)); len(types) != 1 || types[0] != "application/octet-stream" {
			t.Errorf("the report's blob: %q", types)
		}
		run(t, ctx, "delete the schedule (asked)", chromedp.Click(css(`button.schedule-delete[data-owner="Team Console"]`)))
		run(t, ctx, "delete the schedule (confirmed)", chromedp.Click(css(`button.schedule-delete[data-owner="Team Console"]`)))
		waitJS(t, ctx, "the schedule gone", `!!document.getElementById('report-since') && !document.querySelector('tr[data-owner="Team Console"]') && document.getElementById('main').textContent.includes('no schedules')`)
	})
	// Found by review: a screen still loading for an older hash drew over
	// the newer one, and kept its live stream open unseen (the token has
	// four).
	t.Run("quick navigation shows the last screen, with no stream left open", func(t *testing.T) {
		run(t, ctx, "the cluster", chromedp.Navigate(console+"#/"), chromedp.WaitVisible(css("#cluster-chart")))
		value(t, ctx, "count the streams", chromedp.Evaluate[bool](`(() => { window.__streams = 0; const f = window.fetch;
			window.fetch = (u, o) => { const p = f(u, o); if (String(u).includes('/v1/records/stream')) { window.__streams++;
				o.signal.addEventListener('abort', () => window.__streams--); } return p; }; return true; })()`))
		value(t, ctx, "navigate fast", chromedp.Evaluate[bool](`(() => { ['#/api/demo.hello', '#/api/demo.mock', '#/api/demo.hello', '#/apps'].forEach((h, i) => setTimeout(() => { location.hash = h; }, 5 * i)); return true; })()`))
		waitJS(t, ctx, "the apps screen", `!!document.querySelector('#main h1') && document.querySelector('#main h1').textContent === 'Apps'`)
		time.Sleep(time.Second) // what the older screens would still draw
		h1 := value(t, ctx, "h1", chromedp.Evaluate[string](`document.querySelector('#main h1').textContent`))
		streams := value(t, ctx, "streams", chromedp.Evaluate[int](`window.__streams`))
		if h1 != "Apps" || streams != 0 {
			t.Errorf("#/apps shows %q with %d record streams open (want Apps, 0)", h1, streams)
		}
	})
	t.Run("a hash that does not decode is an error, not a stale screen", func(t *testing.T) {
		value(t, ctx, "bad hash", chromedp.Evaluate[bool](`(location.hash = '#/api/%E0%A4%A', true)`))
		waitJS(t, ctx, "the error", `document.getElementById('main').textContent.includes('The console failed')`)
		for _, h := range []string{"#/api/.", "#/api/.."} {
			value(t, ctx, "dots", chromedp.Evaluate[bool](fmt.Sprintf(`(location.hash = %q, true)`, h)))
			waitJS(t, ctx, "the error for "+h, `document.getElementById('main').textContent.includes('no API is named')`)
		}
	})
	t.Run("a viewer's token is offered no write", func(t *testing.T) {
		// The admin's token is offered the writes (else the check below
		// would pass on a screen that draws no button at all).
		openAPI(t, ctx, console, "demo.hello")
		if !value(t, ctx, "admin's save", chromedp.Evaluate[bool](`document.getElementById('save').offsetParent !== null`)) {
			t.Fatal("the admin's token is not offered Save")
		}
		r, err := do("POST", srv.admin+"/v1/tokens", strings.NewReader(`{"name":"console-viewer","role":"viewer"}`), http.Header{"Authorization": {"Bearer " + token}})
		var made struct{ Token string }
		if err != nil || r.status != http.StatusCreated || json.Unmarshal(r.body, &made) != nil {
			t.Fatalf("a viewer token: %v %v", r, err)
		}
		run(t, ctx, "sign out", chromedp.Click(css("#signout")), chromedp.WaitVisible(css("#login")))
		run(t, ctx, "sign in as a viewer", chromedp.SendKeys(css("#token"), made.Token), chromedp.Click(css("#signin")))
		waitJS(t, ctx, "the viewer named", `document.getElementById('whoami').textContent === 'console-viewer (viewer)'`)
		writes := `/save|create|make|delete|purge|degrade|restore|drill|replay|kick|cut|hold|start|pause|resume|promote|rollback|edit|run|look up|request/i`
		for hash, ready := range map[string]string{"#/api/demo.hello": "entry", "#/apps": "app-id", "#/push": "topic-entry", "#/jobs": "purge",
			"#/reports": "report-since", "#/alerts": "alert-entry"} {
			run(t, ctx, hash, chromedp.Navigate(console+hash))
			waitJS(t, ctx, hash+" drawn", fmt.Sprintf(`!!document.getElementById(%q)`, ready))
			offered := value(t, ctx, hash+"'s buttons", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#main button')].filter(b => b.offsetParent !== null && !b.disabled &&
				`+writes+`.test(b.textContent)).map(b => b.textContent)`))
			if len(offered) > 0 {
				t.Errorf("%s offers a viewer %q", hash, offered)
			}
			if hash == "#/api/demo.hello" && !value(t, ctx, "read-only", chromedp.Evaluate[bool](`document.getElementById('entry').readOnly`)) {
				t.Errorf("a viewer may edit the entry")
			}
		}
	})
	if calls.Load() == 0 {
		t.Error("no traffic reached the edge")
	}
}

// openAPI opens an API's screen and waits until it is drawn: a hash
// change draws it anew, and the screen before has the same elements.
func openAPI(t *testing.T, ctx context.Context, console, name string) {
	t.Helper()
	run(t, ctx, "open "+name, chromedp.Navigate(console+"#/api/"+name))
	waitJS(t, ctx, name+"'s screen", fmt.Sprintf(`!!document.querySelector('#main h1') && document.querySelector('#main h1').firstChild.textContent === %q && !!document.getElementById('entry')`, name))
}

// waitJS waits until a JavaScript expression is true in the page.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := chromedp.Run(tctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restGet GETs an admin API resource with the token, its body.
func restGet(t *testing.T, url, token string) string {
	t.Helper()
	r, err := do("GET", url, nil, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET %s: %v %v", url, r, err)
	}
	return string(r.body)
}

package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The documented browser client (examples/push/browser.html) in a real
// Chromium against a real serve: it connects with its key in a
// subprotocol from an origin the topic lists, gets live messages, and
// after the page reloads resumes after its stored cursor with nothing
// missed or repeated. A page of another origin is refused.
func TestPushInBrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	srv := startNode(t, "serve", "serve", "")
	srv.waitReady(t)
	page := httptest.NewServer(http.FileServer(http.Dir("../examples/push")))
	defer page.Close()
	topic := fmt.Sprintf(`{"name":"web.news","publish":["web-writer"],"subscribe":["web-reader"],"origins":[%q]}`, page.URL)
	if res := jetway(t, topic, "topic", "put", "-", "--nats", srv.natsURL); res.code != 0 {
		t.Fatalf("topic put: %s%s", res.stdout, res.stderr)
	}
	writer, reader := createAppKey(t, srv.natsURL, "web-writer"), createAppKey(t, srv.natsURL, "web-reader")
	publish := func(data string) {
		t.Helper()
		waitForFunc(t, func() error {
			r, err := do(http.MethodPost, srv.edge+"/_jetway/publish/web.news", strings.NewReader(data), http.Header{"X-Api-Key": {writer}})
			if err != nil || r.status != http.StatusOK {
				return fmt.Errorf("publish %s: %v %v", data, r, err)
			}
			return nil
		})
	}
	publish("before") // before the page first connects: not for it (live only)
	q := url.Values{"edge": {"ws" + strings.TrimPrefix(srv.edge, "http")}, "topic": {"web.news"}, "key": {reader}}
	run(t, ctx, "open the page", chromedp.Navigate(page.URL+"/browser.html#"+q.Encode()))
	waitJS(t, ctx, "the subscription", `window.jetway && window.jetway.ready`)
	publish("one")
	waitJS(t, ctx, "a live message", `window.jetway.got.join(",") === "one"`)
	// Away (the page reloads), two messages meanwhile: back after its cursor.
	run(t, ctx, "leave", chromedp.Navigate("about:blank"))
	publish("two")
	publish("three")
	run(t, ctx, "come back", chromedp.Navigate(page.URL+"/browser.html#"+q.Encode()))
	waitJS(t, ctx, "the missed messages, once, in order", `window.jetway && window.jetway.got.join(",") === "two,three"`)
	if text := value(t, ctx, "the page's text", chromedp.Evaluate[string](`document.getElementById("messages").textContent`)); !strings.Contains(text, "three") {
		t.Errorf("page: %q", text)
	}
	// The same page from an origin the topic does not list is refused.
	other := httptest.NewServer(http.FileServer(http.Dir("../examples/push")))
	defer other.Close()
	run(t, ctx, "open from another origin", chromedp.Navigate(other.URL+"/browser.html#"+q.Encode()))
	publish("four")
	waitJS(t, ctx, "the other origin's page loaded", `!!window.jetway`)
	time.Sleep(1500 * time.Millisecond) // its connects are refused (403 before the upgrade)
	if ready := value(t, ctx, "ready", chromedp.Evaluate[bool](`window.jetway.ready`)); ready {
		t.Error("a page of an origin the topic does not list subscribed")
	}
}

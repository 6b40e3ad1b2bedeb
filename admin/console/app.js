// The Jetway console: one page over the admin REST API (/v1/). Every value
// shown is put in the page as text (textContent), never as markup, so an
// entry's description or an app's name cannot run in the operator's
// browser. The token lives in this tab's session storage only.

import { LineChart } from './chart.js';

const TOKEN = 'jetway.admin-token';
const main = document.getElementById('main');
let leave = []; // what the screen shown must stop (live streams) when another is
let gen = 0; // the screen now shown; a screen still loading for an older one draws nothing
let me = null; // the token's name, id and role (GET /v1/whoami); null: not known yet

// can says whether the token's role may do what needs role: the console
// offers only those actions (the server refuses the others anyway). A
// role not known yet is taken as a viewer's.
const RANKS = { viewer: 0, operator: 1, admin: 2 };
function can(role) { return !!me && (RANKS[me.role] ?? -1) >= RANKS[role]; }

// --- the API -------------------------------------------------------------

function token() { return sessionStorage.getItem(TOKEN) || ''; }

async function api(method, path, { body, headers = {} } = {}) {
  const h = { Authorization: 'Bearer ' + token(), ...headers };
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const r = await fetch(path, { method, headers: h, body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)) });
  const text = await r.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (r.status === 401) {
    signOut('The token was refused: ' + (json && json.message || r.status));
    throw new Error('unauthenticated');
  }
  return { status: r.status, ok: r.ok, etag: r.headers.get('ETag'), json, text };
}

// live follows the per-second records (server-sent events over fetch, so
// the token travels in a header, never in the URL) until the screen
// changes; onBatch gets each batch of records.
function live(g, query, onBatch) {
  if (g !== gen) return;
  const ctl = new AbortController();
  leave.push(() => ctl.abort());
  (async () => {
    let pause = 1000;
    while (!ctl.signal.aborted) {
      try {
        const r = await fetch('/v1/records/stream' + query, { headers: { Authorization: 'Bearer ' + token() }, signal: ctl.signal });
        if (r.status === 401) { signOut('The token was refused.'); return; }
        if (!r.ok) {
          // 429: the token holds its streams already; 404: no live feed here.
          if (r.body) r.body.cancel();
          pause = Math.min(pause * 2, 30000);
        } else {
          pause = 1000;
          const reader = r.body.getReader();
          const dec = new TextDecoder();
          let buf = '';
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += dec.decode(value, { stream: true });
            let i;
            while ((i = buf.indexOf('\n\n')) >= 0) {
              const event = buf.slice(0, i);
              buf = buf.slice(i + 2);
              const data = event.split('\n').filter(l => l.startsWith('data: ')).map(l => l.slice(6)).join('\n');
              if (data) { try { onBatch(JSON.parse(data)); } catch { /* a batch it cannot read */ } }
            }
          }
        }
      } catch { if (ctl.signal.aborted) return; }
      await new Promise(res => setTimeout(res, pause));
    }
  })();
}

// --- the page ------------------------------------------------------------

// el builds an element: attributes, then children (strings become text).
// need: the least role (operator, admin) its action needs: a button or an
// input for a token below it is hidden and disabled, an editor read-only.
function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'need') {
      e.dataset.need = v;
      if (can(v)) continue;
      if (tag === 'textarea') e.readOnly = true;
      else { e.hidden = true; e.disabled = true; }
    } else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

// show draws screen g, unless another screen was asked for since.
function show(g, ...nodes) {
  if (g !== gen) return false;
  main.replaceChildren(...nodes);
  return true;
}

function table(heads, rows) {
  return el('table', {}, el('thead', {}, el('tr', {}, heads.map(h => el('th', {}, h)))), el('tbody', {}, rows));
}

function ms(ns) { return ns ? (ns / 1e6).toFixed(ns < 1e7 ? 2 : 0) + ' ms' : '–'; }

function errorText(r) {
  const j = r.json || {};
  const problems = (j.problems || []).map(p => (p.path ? p.path + ': ' : '') + p.message);
  return [j.code ? j.code + ': ' : '', j.message || r.text || ('HTTP ' + r.status), problems.length ? '\n' + problems.join('\n') : ''].join('');
}

function signOut(why) {
  sessionStorage.removeItem(TOKEN);
  me = null;
  document.getElementById('bar').hidden = true;
  stopScreen();
  login(why);
}

function login(why) {
  const input = el('input', { type: 'password', id: 'token', autocomplete: 'off', placeholder: 'admin token' });
  const msg = el('p', { class: 'error', id: 'login-error' }, why || '');
  const form = el('form', { class: 'login', id: 'login', onsubmit: async ev => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN, input.value.trim());
    me = null;
    try {
      const r = await api('GET', '/v1/apis');
      if (!r.ok) { msg.textContent = errorText(r); return; }
    } catch { return; }
    route();
  } }, el('h1', {}, 'Jetway console'), el('label', { for: 'token' }, 'Admin API token'), input, el('button', { class: 'primary', type: 'submit', id: 'signin' }, 'Sign in'), msg,
  el('p', { class: 'muted' }, 'jetway serve writes its first token to <data>/admin-token. The token stays in this tab only.'));
  gen++; // a screen still loading draws nothing over the login
  main.replaceChildren(form);
  input.focus();
}

// --- live records, summed per API and second ----------------------------

// Seconds keeps the last records of each API, per second, summed across
// nodes (latencies: the slowest node's).
class Seconds {
  constructor() { this.byAPI = new Map(); }
  add(batch) {
    for (const r of batch) {
      const t = Math.floor(Date.parse(r.ts) / 1000);
      let m = this.byAPI.get(r.api);
      if (!m) { m = new Map(); this.byAPI.set(r.api, m); }
      const s = m.get(t) || { t, pass: 0, block: 0, success: 0, error: 0, p50: 0, p90: 0, p99: 0, p999: 0 };
      s.pass += r.pass; s.block += r.block; s.success += r.success; s.error += r.error;
      s.p50 = Math.max(s.p50, r.p50_ns || 0); s.p90 = Math.max(s.p90, r.p90_ns || 0);
      s.p99 = Math.max(s.p99, r.p99_ns || 0); s.p999 = Math.max(s.p999, r.p999_ns || 0);
      m.set(t, s);
      for (const k of m.keys()) if (k < t - 120) m.delete(k);
    }
  }
  latest(api) {
    const m = this.byAPI.get(api);
    if (!m || m.size === 0) return null;
    return m.get(Math.max(...m.keys()));
  }
  total(t) {
    let calls = 0, errors = 0;
    for (const m of this.byAPI.values()) {
      const s = m.get(t);
      if (s) { calls += s.pass + s.block; errors += s.error + s.block; }
    }
    return { calls, errors };
  }
  newest() {
    let t = 0;
    for (const m of this.byAPI.values()) for (const k of m.keys()) t = Math.max(t, k);
    return t;
  }
}

// --- screens -------------------------------------------------------------

async function cluster(g) {
  const [apis, degraded, alerts, beats] = await Promise.all([api('GET', '/v1/apis'), api('GET', '/v1/degrade'), api('GET', '/v1/alerts'), api('GET', '/v1/nodes')]);
  if (!apis.ok) { show(g, el('p', { class: 'error' }, errorText(apis))); return; }
  const down = new Set(((degraded.json && degraded.json.items) || []).filter(d => !d.error).map(d => d.api));
  const items = apis.json.items || [];
  const canvas = el('canvas', { id: 'cluster-chart' });
  const cards = {
    qps: el('div', { class: 'v', id: 'qps' }, '0'), err: el('div', { class: 'v', id: 'errors' }, '0 %'),
  };
  // Breakers open and alerts firing, from the nodes' heartbeats (each
  // worker says its breakers, the node judging alerts says what fires),
  // read again every 2 s.
  const health = { breakers: el('div', { class: 'v', id: 'breakers-open' }, '0'), alerts: el('div', { class: 'v', id: 'alerts-firing' }, '0'), list: el('div', { id: 'health' }),
    standby: el('div', { class: 'v', id: 'edges-on-standby' }, '0'), sited: el('div', { class: 'k' }) };
  // Edges with a standby cluster say in their beats which site their
  // calls go to; the on_standby rules are what fires for one there.
  const standbyRules = ((alerts.json && alerts.json.items) || []).filter(a => a.rule && a.rule.kind === 'on_standby').map(a => a.name);
  const standbyCard = el('div', { class: 'card', id: 'standby-card', hidden: true }, health.standby, health.sited);
  const tagged = new Map(); // api → its breaker tag
  function showHealth(r) {
    const nodes = (r && r.ok && r.json && (r.json.items || r.json)) || [];
    const open = new Map(), firing = new Set();
    for (const n of nodes) {
      for (const b of n.breakers_open || []) open.set(b, (open.get(b) || []).concat(n.id));
      for (const a of n.alerts_firing || []) firing.add(a);
    }
    health.breakers.textContent = String(open.size);
    health.alerts.textContent = String(firing.size);
    const sited = nodes.filter(n => n.site), onStandby = sited.filter(n => n.site === 'standby');
    standbyCard.hidden = sited.length === 0;
    health.standby.textContent = String(onStandby.length);
    health.sited.textContent = 'edges on standby, of ' + sited.length + ' with a standby; ' +
      (standbyRules.length ? 'on_standby rule: ' + standbyRules.join(', ') : 'no on_standby rule');
    const items = [...open].map(([api, ids]) => el('li', { class: 'error' }, 'breaker open: ' + api + ' (on ' + ids.join(', ') + ')'))
      .concat([...firing].map(a => el('li', { class: 'error' }, 'alert firing: ' + a)))
      .concat(onStandby.map(n => el('li', { class: 'error' }, 'edge on standby: ' + n.id + ' sends its calls to its standby cluster')));
    health.list.replaceChildren(items.length ? el('section', {}, el('ul', { id: 'health-list' }, items)) : '');
    for (const [name, tag] of tagged) tag.hidden = !open.has(name);
  }
  const cells = new Map();
  const rows = items.map(it => {
    const e = it.entry || {};
    const c = { qps: el('td', { class: 'num' }, '0'), err: el('td', { class: 'num' }, '–'), p50: el('td', { class: 'num' }, '–'), p99: el('td', { class: 'num' }, '–') };
    cells.set(it.name, c);
    const tags = [];
    if (it.name.startsWith('draft.')) tags.push(el('span', { class: 'tag warn' }, 'draft'));
    if (down.has(it.name)) tags.push(el('span', { class: 'tag bad' }, 'degraded'));
    if (it.newest_error) tags.push(el('span', { class: 'tag bad', title: it.newest_error }, 'newest invalid'));
    if (e.channels) tags.push(el('span', { class: 'tag' }, e.channels.length + ' channels'));
    const br = el('span', { class: 'tag bad', hidden: true }, 'breaker open');
    tagged.set(it.name, br);
    tags.push(br);
    return el('tr', {}, el('td', {}, el('a', { href: '#/api/' + encodeURIComponent(it.name) }, it.name), ' ', tags),
      el('td', {}, ((e.route && e.route.method) || '') + ' ' + ((e.route && e.route.path) || '')), el('td', {}, e.pool || ''),
      el('td', { class: 'num' }, it.revision), c.qps, c.err, c.p50, c.p99);
  });
  if (!show(g, el('h1', {}, 'Cluster'),
    el('div', { class: 'cards' },
      el('div', { class: 'card' }, cards.qps, el('div', { class: 'k' }, 'calls per second')),
      el('div', { class: 'card' }, cards.err, el('div', { class: 'k' }, 'failed or refused')),
      el('div', { class: 'card' }, el('div', { class: 'v', id: 'degraded-count' }, String(down.size)), el('div', { class: 'k' }, 'APIs degraded')),
      el('div', { class: 'card' }, health.breakers, el('div', { class: 'k' }, 'breakers open')),
      el('div', { class: 'card' }, health.alerts, el('div', { class: 'k' }, 'alerts firing, of ' + ((alerts.json && alerts.json.items) || []).length + ' rules')),
      standbyCard),
    health.list,
    el('section', {}, canvas),
    el('section', {}, table(['API', 'route', 'pool', 'revision', 'calls/s', 'error %', 'p50', 'p99'], rows)))) return;
  const timer = setInterval(async () => { try { showHealth(await api('GET', '/v1/nodes')); } catch { /* signed out */ } }, 2000);
  leave.push(() => clearInterval(timer));
  showHealth(beats);
  const chart = new LineChart(canvas, [{ name: 'calls/s', color: '#2454c5' }, { name: 'failed/s', color: '#c62828' }]);
  const secs = new Seconds();
  live(g, '', batch => {
    secs.add(batch);
    const t = secs.newest();
    const tot = secs.total(t);
    chart.push(t, [tot.calls, tot.errors]);
    cards.qps.textContent = String(tot.calls);
    cards.err.textContent = (tot.calls ? (100 * tot.errors / tot.calls).toFixed(1) : '0') + ' %';
    for (const [name, c] of cells) {
      const s = secs.latest(name);
      if (!s || s.t < t - 2) { c.qps.textContent = '0'; continue; }
      const n = s.pass + s.block;
      c.qps.textContent = String(n);
      c.err.textContent = n ? (100 * (s.error + s.block) / n).toFixed(1) + ' %' : '–';
      c.p50.textContent = ms(s.p50);
      c.p99.textContent = ms(s.p99);
    }
  });
}

let validator = null;
async function validateEntry(doc) {
  if (!validator) {
    const r = await api('GET', '/v1/schemas/api');
    if (!r.ok || !window.ajv2020) return [];
    const ajv = new window.ajv2020({ allErrors: true, strict: false });
    validator = ajv.compile(r.json);
  }
  if (validator(doc)) return [];
  return validator.errors.map(e => (e.instancePath || '/') + ' ' + e.message + (e.params && e.params.additionalProperty ? ': ' + e.params.additionalProperty : ''));
}

// lineDiff is a line-by-line diff of two texts (longest common
// subsequence): [kind, line] with kind ' ', '-' or '+'.
function lineDiff(a, b) {
  const x = a.split('\n'), y = b.split('\n');
  const n = x.length, m = y.length;
  if (n * m > 4e6) { // the table would not fit: both whole, one after the other
    return x.map(l => ['-', l]).concat(y.map(l => ['+', l]));
  }
  const L = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push([' ', x[i]]); i++; j++; } else if (L[i + 1][j] >= L[i][j + 1]) out.push(['-', x[i++]]); else out.push(['+', y[j++]]);
  }
  while (i < n) out.push(['-', x[i++]]);
  while (j < m) out.push(['+', y[j++]]);
  return out;
}

function diffView(from, to, id) {
  return el('pre', { class: 'diff', id }, lineDiff(from, to).map(([k, l]) => el('span', { class: k === '+' ? 'add' : k === '-' ? 'del' : '' }, k + ' ' + l + '\n')));
}

const pretty = v => JSON.stringify(v, null, 2);

function describeDrill(f) {
  const parts = [];
  if (f.abort) parts.push('abort ' + f.abort.percent + '% with ' + f.abort.status);
  if (f.delay) parts.push('delay ' + f.delay.percent + '% by ' + f.delay.min + (f.delay.max ? '–' + f.delay.max : ''));
  const only = [];
  if (f.apps && f.apps.length) only.push('apps ' + f.apps.join(', '));
  if (f.headers) only.push('headers ' + Object.entries(f.headers).map(([k, v]) => k + ': ' + v).join('; '));
  return parts.join(', ') + (only.length ? ' of calls with ' + only.join(' and ') : '') + ' until ' + new Date(f.expires_at).toLocaleString();
}

// parseHeaders reads "Name: value; Other: value" (a drill's header
// filter); null for none, an Error for a pair without a colon.
function parseHeaders(text) {
  const out = {};
  for (const pair of text.split(';').map(p => p.trim()).filter(Boolean)) {
    const i = pair.indexOf(':');
    if (i <= 0) throw new Error('a header filter is "Name: value; Other: value", not ' + JSON.stringify(pair));
    out[pair.slice(0, i).trim()] = pair.slice(i + 1).trim();
  }
  return Object.keys(out).length ? out : null;
}

const commaList = text => text.split(',').map(v => v.trim()).filter(Boolean);

// when is a stored time, short ('–' for none).
function when(t) { return t && !String(t).startsWith('0001-') ? String(t).replace('T', ' ').replace(/\.\d+/, '') : '–'; }

const stateTag = st => el('span', { class: 'tag ' + (st === 'available' ? 'ok' : st === 'cut' ? 'bad' : 'warn') }, st);

// channelsSection: an API's channel set (docs/channels.md), read again
// every 3 s once started: each channel's state, share and override with
// Cut, Hold and Restore (an operator's), the history, and a release's
// stage and percent with its commands.
function channelsSection(g, path, entry) {
  const rows = el('tbody', { id: 'channels' });
  const hist = el('tbody', { id: 'channel-history' });
  const msg = el('div', { id: 'channel-status' });
  const reason = el('input', { need: 'operator', type: 'text', id: 'channel-reason', placeholder: 'reason (optional)', title: 'kept with a cut, a hold or a release command' });
  const rel = entry.release ? { state: el('div', { id: 'release-state' }, '–'), command: el('div', { class: 'muted', id: 'release-command' }), rows: el('tbody', { id: 'release-history' }) } : null;
  const empty = (cols, r, none) => [el('tr', {}, el('td', { colspan: cols, class: 'muted' }, r && !r.ok ? errorText(r) : none))];
  const pct = n => String(Math.round(n * 100) / 100);

  async function act(method, url, body, done) {
    const r = await api(method, url, body === undefined ? {} : { body });
    if (!r.ok) { msg.replaceChildren(el('p', { class: 'error' }, errorText(r))); return; }
    msg.replaceChildren(el('p', { class: 'notice', id: 'channel-done' }, done));
    refresh();
  }
  const override = ch => path + '/channels/' + encodeURIComponent(ch) + '/override';
  function showChannels(r) {
    const list = (r && r.ok && r.json && r.json.channels) || [];
    rows.replaceChildren(...(list.length ? list.map(c => {
      const o = c.override;
      return el('tr', { 'data-channel': c.name }, el('td', {}, c.name, c.backup ? el('span', { class: 'tag' }, 'backup') : ''),
        el('td', {}, stateTag(c.state)), el('td', { class: 'num' }, pct(100 * c.share) + ' %'), el('td', { class: 'num' }, c.weight),
        el('td', { class: 'override', title: o && o.reason ? o.reason : null }, o ? o.state + ' by ' + o.by : '–'),
        el('td', {}, when(c.since)), el('td', {}, c.reason || ''),
        el('td', { class: 'actions' },
          el('button', { type: 'button', need: 'operator', class: 'danger channel-cut', 'data-channel': c.name, disabled: o && o.state === 'cut', title: 'hold it cut until restored (an operator\'s)',
            onclick: () => act('PUT', override(c.name), { state: 'cut', reason: reason.value }, c.name + ' is held cut.') }, 'Cut'),
          el('button', { type: 'button', need: 'operator', class: 'channel-hold', 'data-channel': c.name, disabled: o && o.state === 'available', title: 'hold it available at its full share until restored',
            onclick: () => act('PUT', override(c.name), { state: 'available', reason: reason.value }, c.name + ' is held available.') }, 'Hold'),
          el('button', { type: 'button', need: 'operator', class: 'channel-restore', 'data-channel': c.name, disabled: !o, title: 'clear the override: the controller\'s again',
            onclick: () => act('DELETE', override(c.name), undefined, c.name + ' is the controller\'s again.') }, 'Restore')));
    }) : empty(8, r, 'no channels')));
  }
  function showHistory(r) {
    const items = ((r && r.ok && r.json && r.json.items) || []).slice(-20).reverse();
    hist.replaceChildren(...(items.length ? items.map(t => el('tr', {}, el('td', {}, when(t.at)), el('td', {}, t.channel), el('td', {}, t.from + ' → ' + t.to),
      el('td', { class: 'num' }, pct(100 * t.share) + ' %'), el('td', {}, t.by), el('td', { class: 'num' }, (t.window && t.window.calls) || 0),
      el('td', { class: 'num' }, (t.window && t.window.failures) || 0), el('td', {}, t.reason || ''))) : empty(8, r, 'no change yet: no controller has moved a channel')));
  }
  function showRelease(r) {
    const v = r && r.ok && r.json;
    if (!v) { rel.state.replaceChildren(el('span', { class: 'error' }, r ? errorText(r) : '')); return; }
    const st = v.state;
    rel.state.replaceChildren(...(st
      ? ['Canary ', v.canary, ': ', el('span', { class: 'tag', id: 'release-stage' }, st.stage), ' at ', el('strong', { id: 'release-percent' }, pct(st.percent) + ' %'),
        ', step ' + (st.step + 1) + ' since ' + when(st.since), st.reason ? el('div', { class: 'muted' }, st.reason) : '']
      : ['Canary ', v.canary, ': ', el('span', { class: 'tag', id: 'release-stage' }, 'pending'), ' — no controller has stepped it yet']));
    const c = v.command;
    rel.command.textContent = c ? 'Last command: ' + c.action + ' by ' + c.by + ' at ' + when(c.at) + (st && st.command === c.id ? ' (applied)' : ' (not applied yet)') : '';
    const items = (v.history || []).slice(-20).reverse();
    rel.rows.replaceChildren(...(items.length ? items.map(e => el('tr', {}, el('td', {}, when(e.at)), el('td', {}, e.from + ' → ' + e.to),
      el('td', { class: 'num' }, pct(e.percent) + ' %'), el('td', {}, e.by), el('td', { class: 'num' }, (e.canary_window && e.canary_window.calls) || 0),
      el('td', { class: 'num' }, (e.canary_window && e.canary_window.failures) || 0), el('td', {}, e.reason || ''))) : empty(7, null, 'no change yet')));
  }
  async function refresh() {
    try {
      const [c, h, rl] = await Promise.all([api('GET', path + '/channels'), api('GET', path + '/channels/history'), rel ? api('GET', path + '/release') : null]);
      if (g !== gen) return;
      showChannels(c);
      showHistory(h);
      if (rel) showRelease(rl);
    } catch { /* signed out */ }
  }
  const head = (...hs) => el('thead', {}, el('tr', {}, hs.map(h => el('th', {}, h))));
  const node = el('section', { id: 'channel-set' }, el('h2', {}, 'Channels'),
    el('div', { class: 'row' }, reason, el('span', { class: 'muted' }, 'Cut and Hold beat the controller until Restore.')), msg,
    el('table', {}, head('channel', 'state', 'share', 'weight', 'override', 'since', 'reason', ''), rows),
    rel ? [el('h2', {}, 'Release'), rel.state, rel.command,
      el('div', { class: 'row' }, ['start', 'pause', 'resume', 'promote', 'rollback'].map(a => el('button', { type: 'button', need: 'operator', id: 'release-' + a, class: a === 'rollback' ? 'danger' : a === 'promote' ? 'primary' : null,
        onclick: () => act('POST', path + '/release', { action: a, reason: reason.value }, 'Sent ' + a + ' to the release: the controller applies it within a second or two.') }, a[0].toUpperCase() + a.slice(1)))),
      el('table', {}, head('at', 'stage', 'percent', 'by', 'canary calls', 'failed', 'reason'), rel.rows)] : '',
    el('h2', {}, 'History'), el('table', {}, head('at', 'channel', 'change', 'share', 'by', 'calls', 'failed', 'reason'), hist));
  return {
    node,
    start() {
      if (g !== gen) return;
      refresh();
      const timer = setInterval(refresh, 3000);
      leave.push(() => clearInterval(timer));
    },
  };
}

async function apiScreen(g, name) {
  const path = '/v1/apis/' + encodeURIComponent(name);
  const [got, revs, deg, draft, fault] = await Promise.all([api('GET', path), api('GET', path + '/revisions'), api('GET', path + '/degrade'),
    name.startsWith('draft.') ? null : api('GET', path + '/draft'), api('GET', path + '/fault')]);
  if (!got.ok) { show(g, el('h1', {}, name), el('p', { class: 'error' }, errorText(got))); return; }
  let etag = got.etag;
  const entry = got.json;
  const editor = el('textarea', { need: 'admin', id: 'entry', spellcheck: 'false' });
  editor.value = pretty(entry);
  const status = el('div', { id: 'save-status' });
  const conflict = el('div', { id: 'conflict' });

  async function save(force) {
    status.replaceChildren(); conflict.replaceChildren();
    let doc;
    try { doc = JSON.parse(editor.value); } catch (e) { status.append(el('p', { class: 'error' }, 'Not JSON: ' + e.message)); return; }
    const problems = await validateEntry(doc);
    if (problems.length) { status.append(el('p', { class: 'error' }, 'Not saved: the entry does not match its schema'), el('ul', { class: 'problems', id: 'problems' }, problems.map(p => el('li', {}, p)))); return; }
    const r = await api('PUT', path, { body: doc, headers: { 'If-Match': force || etag } });
    if (r.ok) { etag = r.etag; status.append(el('p', { class: 'notice', id: 'saved' }, 'Saved at revision ' + r.json.revision + '.')); return; }
    if (r.status === 412) {
      const won = r.json && r.json.current_revision;
      const [cur, trail] = await Promise.all([api('GET', path), api('GET', '/v1/audit?kind=api&limit=200')]);
      const mineKey = ((trail.json && trail.json.items) || []).filter(c => c.key === name);
      const change = mineKey.filter(c => c.revision === won).pop() || mineKey.pop();
      const who = change ? change.actor + ' at ' + new Date(change.at).toLocaleString() : 'someone';
      if (!cur.ok) {
        conflict.append(el('p', { class: 'error', id: 'conflict-message' }, 'Not saved: ' + who + ' changed this API first: ' + errorText(cur)));
        return;
      }
      conflict.append(el('p', { class: 'error', id: 'conflict-message' }, 'Not saved: ' + who + ' changed this API first (revision ' + won + '). Their version against yours:'),
        diffView(pretty(cur.json), pretty(doc), 'conflict-diff'),
        el('div', { class: 'row' },
          el('button', { type: 'button', onclick: () => { editor.value = pretty(cur.json); etag = cur.etag; conflict.replaceChildren(); } }, 'Take theirs'),
          el('button', { type: 'button', need: 'admin', class: 'danger', onclick: () => save(cur.etag) }, 'Save mine over theirs')));
      return;
    }
    status.append(el('p', { class: 'error', id: 'save-error' }, errorText(r)));
  }

  // The degrade switch, at its own revision.
  const degraded = deg.ok && deg.json && deg.json.on;
  const invalidSwitch = deg.status === 409 && deg.json && deg.json.current_revision;
  const degEtag = deg.ok ? deg.etag : invalidSwitch ? '"' + deg.json.current_revision + '"' : null;
  const switchMsg = el('span', { id: 'degrade-status' }, degraded ? 'degraded' : invalidSwitch ? 'the stored switch does not validate: ' + errorText(deg) : 'serving');
  async function flip() {
    const r = degraded || invalidSwitch
      ? await api('DELETE', path + '/degrade', { headers: { 'If-Match': degEtag } })
      : await api('PUT', path + '/degrade', { body: { on: true, reason: 'from the console' }, headers: degEtag ? { 'If-Match': degEtag } : { 'If-None-Match': '*' } });
    if (!r.ok) { switchMsg.textContent = errorText(r); return; }
    route();
  }

  // The fault drill, at its own revision: one kind at a time from here
  // (the CLI and REST take both), for every call or only the apps and
  // headers named.
  const drill = fault.ok ? fault.json : null;
  const drillMsg = el('span', { id: 'fault-status' }, drill ? describeDrill(drill) : 'none');
  const kind = el('select', { need: 'operator', id: 'fault-kind' }, el('option', { value: 'abort' }, 'abort with status'), el('option', { value: 'delay' }, 'delay by'));
  const what = el('input', { need: 'operator', type: 'text', id: 'fault-value', value: '503', size: 6 });
  const share = el('input', { need: 'operator', type: 'text', id: 'fault-percent', value: '100', size: 4 });
  const minutes = el('input', { need: 'operator', type: 'text', id: 'fault-minutes', value: '5', size: 4 });
  const onlyApps = el('input', { need: 'operator', type: 'text', id: 'fault-apps', placeholder: 'only these apps: app-1, app-2', value: drill && drill.apps ? drill.apps.join(', ') : '' });
  const onlyHeaders = el('input', { need: 'operator', type: 'text', id: 'fault-headers', placeholder: 'only with headers: X-Drill: on; X-Env: test',
    value: drill && drill.headers ? Object.entries(drill.headers).map(([k, v]) => k + ': ' + v).join('; ') : '' });
  kind.addEventListener('change', () => { what.value = kind.value === 'abort' ? '503' : '200ms'; });
  async function startDrill() {
    const percent = Number(share.value);
    const f = { expires_at: new Date(Date.now() + Number(minutes.value) * 60000).toISOString() };
    if (kind.value === 'abort') f.abort = { status: Number(what.value), percent }; else f.delay = { min: what.value, percent };
    const apps = commaList(onlyApps.value);
    if (apps.length) f.apps = apps;
    try { const h = parseHeaders(onlyHeaders.value); if (h) f.headers = h; } catch (e) { drillMsg.textContent = e.message; return; }
    const r = await api('PUT', path + '/fault', { body: f, headers: fault.ok ? { 'If-Match': fault.etag } : { 'If-None-Match': '*' } });
    if (!r.ok) { drillMsg.textContent = errorText(r); return; }
    route();
  }
  async function endDrill() {
    const r = await api('DELETE', path + '/fault', { headers: { 'If-Match': fault.etag } });
    if (!r.ok) { drillMsg.textContent = errorText(r); return; }
    route();
  }

  // Cases and promote.
  const key = el('input', { need: 'operator', type: 'password', id: 'case-key', placeholder: "a sandbox app's API key", autocomplete: 'off' });
  const caseOut = el('div', { id: 'case-results' });
  function showCases(items) {
    caseOut.replaceChildren(table(['case', 'result'], (items || []).map(c => el('tr', {}, el('td', {}, c.name),
      el('td', { class: c.problems && c.problems.length ? 'error' : 'notice' }, c.problems && c.problems.length ? c.problems.join('\n') : 'pass')))));
  }
  async function runCases(onDraft) {
    const r = await api('POST', path + '/test', { body: { key: key.value, draft: onDraft } });
    if (!r.ok) { caseOut.replaceChildren(el('p', { class: 'error' }, errorText(r))); return; }
    showCases(r.json.items);
  }
  async function promote() {
    // At the revisions on screen: a colleague's newer draft, or a change
    // to the API since, refuses the promote (412) instead of being lost.
    const rev = e => Number(String(e).replace(/"/g, ''));
    const r = await api('POST', path + '/promote', { body: { key: key.value, draft_revision: rev(draft.etag), production_revision: rev(etag) } });
    if (r.ok) { route(); return; }
    caseOut.replaceChildren(el('p', { class: 'error' }, errorText(r)));
    if (r.json && r.json.promotion) showCases(r.json.promotion.cases);
  }
  const hasDraft = draft && draft.ok;

  const canvas = el('canvas', { id: 'api-chart' });
  const qps = el('canvas', { id: 'api-qps' });
  const revRows = ((revs.json && revs.json.items) || []).slice().reverse().map(rv => el('tr', {},
    el('td', { class: 'num' }, rv.revision), el('td', {}, rv.op), el('td', {}, rv.created), el('td', {}, rv.error || ''),
    el('td', {}, rv.entry ? el('button', { type: 'button', onclick: () => { revDiff.replaceChildren(el('p', { class: 'muted' }, 'Revision ' + rv.revision + ' against the editor:'), diffView(pretty(rv.entry), editor.value, 'revision-diff')); } }, 'diff') : '')));
  const revDiff = el('div');
  const channels = entry.channels ? channelsSection(g, path, entry) : null;

  show(g, el('h1', {}, name, ' ', degraded ? el('span', { class: 'tag bad' }, 'degraded') : '', hasDraft ? el('span', { class: 'tag warn' }, 'has a draft') : ''),
    el('p', { class: 'muted', id: 'description' }, entry.description || ''),
    el('section', {}, el('h2', {}, 'Latency (slowest node)'), canvas, el('h2', {}, 'Calls per second'), qps),
    el('section', {}, el('h2', {}, 'Switches'), el('div', { class: 'row' }, 'Degrade: ', switchMsg,
      el('button', { type: 'button', need: 'operator', id: 'degrade-toggle', class: degraded ? '' : 'danger', onclick: flip }, degraded ? 'Restore' : 'Degrade')),
      el('div', { class: 'row' }, 'Fault drill: ', drillMsg, drill ? el('button', { type: 'button', need: 'operator', id: 'fault-end', onclick: endDrill }, 'End the drill') : ''),
      el('div', { class: 'row' }, kind, what, ' for ', share, '% of calls, ', minutes, ' minutes ', el('button', { type: 'button', need: 'operator', class: 'danger', id: 'fault-start', onclick: startDrill }, drill ? 'Replace the drill' : 'Start a drill')),
      el('div', { class: 'row' }, 'Only calls of ', onlyApps, ' with ', onlyHeaders, el('span', { class: 'muted' }, 'empty: every call'))),
    channels ? channels.node : '',
    el('section', {}, el('h2', {}, 'Entry'), editor, el('div', { class: 'row' }, el('button', { type: 'button', need: 'admin', class: 'primary', id: 'save', onclick: () => save() }, 'Save'), el('span', { class: 'muted' }, 'revision ' + String(etag).replace(/"/g, ''))), status, conflict),
    el('section', {}, el('h2', {}, 'Cases and release'), el('div', { class: 'row' }, key,
      el('button', { type: 'button', need: 'operator', id: 'run-cases', onclick: () => runCases(false) }, 'Run cases'),
      hasDraft ? el('button', { type: 'button', need: 'operator', id: 'run-draft-cases', onclick: () => runCases(true) }, 'Run the draft\'s cases') : '',
      hasDraft ? el('button', { type: 'button', need: 'admin', class: 'primary', id: 'promote', onclick: promote }, 'Promote the draft (revision ' + draft.etag + ')') : ''), caseOut),
    el('section', {}, el('h2', {}, 'Revisions'), table(['revision', 'op', 'written', 'problem', ''], revRows), revDiff));
  if (channels) channels.start();

  const lat = new LineChart(canvas, [{ name: 'p50', color: '#1a7f37' }, { name: 'p90', color: '#2454c5' }, { name: 'p99', color: '#b26a00' }, { name: 'p99.9', color: '#c62828' }], { unit: ' ms' });
  const calls = new LineChart(qps, [{ name: 'calls/s', color: '#2454c5' }, { name: 'failed/s', color: '#c62828' }]);
  const secs = new Seconds();
  live(g, '?api=' + encodeURIComponent(name), batch => {
    secs.add(batch.filter(r => r.api === name));
    const s = secs.latest(name);
    if (!s) return;
    lat.push(s.t, [s.p50, s.p90, s.p99, s.p999].map(v => v / 1e6));
    calls.push(s.t, [s.pass + s.block, s.error + s.block]);
  });
}

async function apps(g) {
  const r = await api('GET', '/v1/apps');
  if (!r.ok) { show(g, el('p', { class: 'error' }, errorText(r))); return; }
  const id = el('input', { need: 'admin', type: 'text', id: 'app-id', placeholder: 'id' });
  const grants = el('input', { need: 'admin', type: 'text', id: 'app-apis', placeholder: 'APIs it may call: orders.*, users.get' });
  const sandbox = el('input', { need: 'admin', type: 'checkbox', id: 'app-sandbox' });
  const out = el('div', { id: 'app-created' });
  async function create() {
    const body = { id: id.value.trim(), apis: grants.value.split(',').map(s => s.trim()).filter(Boolean), sandbox: sandbox.checked };
    const c = await api('POST', '/v1/apps', { body });
    if (!c.ok) { out.replaceChildren(el('p', { class: 'error' }, errorText(c))); return; }
    out.replaceChildren(el('p', {}, 'App ' + body.id + ' made. Its key is shown this once; keep it now:'), el('div', { class: 'secret', id: 'new-key' }, c.json.key || ''));
  }
  const rows = ((r.json && r.json.items) || []).map(a => el('tr', {}, el('td', {}, a.id), el('td', {}, a.status || ''),
    el('td', {}, a.sandbox ? el('span', { class: 'tag warn' }, 'sandbox') : ''), el('td', {}, (a.apis || []).join(', ')), el('td', { class: 'num' }, a.revision)));
  show(g, el('h1', {}, 'Apps'), el('section', {}, el('h2', {}, 'Make an app'),
    el('div', { class: 'row' }, id, grants, el('label', {}, sandbox, ' sandbox'), el('button', { type: 'button', need: 'admin', class: 'primary', id: 'app-create', onclick: create }, 'Make')), out),
  el('section', {}, table(['id', 'status', '', 'APIs', 'revision'], rows)));
}

// namedEditor is the editor of a resource kept by name at its revision
// (push topics, alert rules; an admin's): a new name creates one, a
// listed one is changed at the revision listed. Its elements' ids are
// KIND-entry, KIND-status and KIND-error.
function namedEditor(kind, path, items, sample) {
  const byName = new Map(items.map(it => [it.name, it]));
  const editor = el('textarea', { need: 'admin', id: kind + '-entry', spellcheck: 'false' });
  editor.value = pretty(sample);
  const status = el('div', { id: kind + '-status' });
  async function save() {
    status.replaceChildren();
    let doc;
    try { doc = JSON.parse(editor.value); } catch (e) { status.append(el('p', { class: 'error' }, 'Not JSON: ' + e.message)); return; }
    const name = String(doc.name || '');
    const known = byName.get(name);
    const r = await api('PUT', path + encodeURIComponent(name), { body: doc, headers: known ? { 'If-Match': '"' + known.revision + '"' } : { 'If-None-Match': '*' } });
    if (!r.ok) { status.append(el('p', { class: 'error', id: kind + '-error' }, errorText(r))); return; }
    route();
  }
  return { editor, status, save };
}

// pushScreen: the topics (each editable at its revision), every edge's
// push counters (read again every 3 s) and connections, and a kick of an
// app's connections on every edge.
async function pushScreen(g) {
  const [topics, stats, conns] = await Promise.all([api('GET', '/v1/topics'), api('GET', '/v1/push/stats'), api('GET', '/v1/push/connections')]);
  if (!topics.ok) { show(g, el('p', { class: 'error' }, errorText(topics))); return; }
  const items = (topics.json && topics.json.items) || [];
  const { editor, status, save } = namedEditor('topic', '/v1/topics/', items, { name: 'orders', publish: ['my-backend-app'], subscribe: ['*'], retention: { max_age: '72h' } });
  const topicRows = items.map(it => {
    const t = it.topic || {};
    return el('tr', {}, el('td', {}, it.name, it.error ? el('span', { class: 'tag bad', title: it.error }, 'invalid') : ''), el('td', {}, t.mode || 'durable'),
      el('td', {}, (t.retention && t.retention.max_age) || '72h'), el('td', {}, (t.publish || []).join(', ')), el('td', {}, (t.subscribe || []).join(', ')),
      el('td', {}, (t.groups && t.groups.names || []).join(', ')), el('td', { class: 'num' }, it.revision),
      el('td', {}, it.topic ? el('button', { type: 'button', need: 'admin', onclick: () => { editor.value = pretty(it.topic); editor.focus(); } }, 'edit') : ''));
  });
  const edges = el('tbody', { id: 'push-edges' });
  function showStats(r) {
    const rows = ((r && r.ok && r.json && r.json.items) || []).map(a => { const s = a.stats || {};
      return el('tr', {}, el('td', {}, a.edge), el('td', { class: 'num' }, s.connections || 0), el('td', { class: 'num' }, s.topics || 0), el('td', { class: 'num' }, s.delivered || 0),
        el('td', { class: 'num' }, s.catch_ups || 0), el('td', { class: 'num' }, s.write_timeouts || 0), el('td', { class: 'num' }, s.refused || 0), el('td', { class: 'num' }, s.acks || 0)); });
    edges.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 8, class: 'muted' }, r && !r.ok ? errorText(r) : 'no edge answered'))]));
  }
  showStats(stats);
  const kickMsg = el('div', { id: 'kick-status' });
  async function kick(app) {
    const r = await api('POST', '/v1/push/kick', { body: { app } });
    if (!r.ok) { kickMsg.replaceChildren(el('p', { class: 'error' }, errorText(r))); return; }
    const n = ((r.json && r.json.items) || []).reduce((n, a) => n + (a.kicked || 0), 0);
    kickMsg.replaceChildren(el('p', { class: 'notice', id: 'kicked' }, 'Ended ' + n + ' connection(s) of ' + app + '. Its clients may come back: to keep it out, disable it.'));
  }
  let connSection;
  if (!conns.ok) connSection = el('p', { class: 'muted' }, conns.status === 403 ? 'The connections name devices and users: an operator\'s to see.' : errorText(conns));
  else {
    const rows = [];
    for (const a of (conns.json && conns.json.items) || []) {
      for (const c of a.connections || []) {
        rows.push(el('tr', {}, el('td', {}, a.edge), el('td', {}, c.topic), el('td', {}, c.app), el('td', {}, c.device || '–'), el('td', {}, c.user || '–'), el('td', {}, c.transport),
          el('td', {}, c.since), el('td', { class: 'num' }, c.seq), el('td', { class: 'num' }, c.lag),
          el('td', {}, el('button', { type: 'button', need: 'operator', class: 'danger kick', 'data-app': c.app, onclick: ev => {
            // Two clicks: the first asks, the second ends every connection of the app on every edge.
            const b = ev.currentTarget;
            if (!b.dataset.armed) { b.dataset.armed = '1'; b.textContent = 'end all of ' + c.app + '?'; return; }
            kick(c.app);
          } }, 'kick ' + c.app))));
      }
      if (a.total > (a.connections || []).length) rows.push(el('tr', {}, el('td', { colspan: 10, class: 'muted' }, a.edge + ': ' + (a.connections || []).length + ' of its ' + a.total + ' listed')));
    }
    connSection = table(['edge', 'topic', 'app', 'device', 'user', 'transport', 'since', 'seq', 'lag', ''], rows);
  }
  if (!show(g, el('h1', {}, 'Push'),
    el('section', {}, el('h2', {}, 'Topics'), table(['topic', 'mode', 'kept', 'publish', 'subscribe', 'groups', 'revision', ''], topicRows),
      el('h2', {}, 'Put a topic'), editor, el('div', { class: 'row' }, el('button', { type: 'button', need: 'admin', class: 'primary', id: 'topic-save', onclick: save }, 'Save'),
        el('span', { class: 'muted' }, 'a new name creates it; a known one is changed at the revision listed')), status),
    el('section', {}, el('h2', {}, 'Edges'), el('table', {}, el('thead', {}, el('tr', {}, ['edge', 'connections', 'topics', 'delivered', 'catch-ups', 'write timeouts', 'refused', 'acks'].map(h => el('th', {}, h)))), edges)),
    el('section', {}, el('h2', {}, 'Connections'), kickMsg, connSection))) return;
  const timer = setInterval(async () => { try { showStats(await api('GET', '/v1/push/stats')); } catch { /* signed out */ } }, 3000);
  leave.push(() => clearInterval(timer));
}

// jobsScreen: every API tier's async jobs (queued, the oldest's age, dead
// letters) and the newest dead letters, read again every 5 s; a row's
// Replay (an operator's) sends its job again and reads both anew.
async function jobsScreen(g) {
  const [queues, dead] = await Promise.all([api('GET', '/v1/jobs/queues'), api('GET', '/v1/deadletters?limit=200')]);
  if (!queues.ok) { show(g, el('p', { class: 'error' }, errorText(queues))); return; }
  const queueRows = el('tbody', { id: 'job-queues' });
  const deadRows = el('tbody', { id: 'dead-letters' });
  const msg = el('div', { id: 'replay-status' });
  const empty = (cols, r, none) => [el('tr', {}, el('td', { colspan: cols, class: 'muted' }, r && !r.ok ? errorText(r) : none))];
  function showQueues(r) {
    const rows = ((r && r.ok && r.json && r.json.items) || []).map(q => el('tr', {}, el('td', {}, q.api), el('td', { class: 'num' }, q.queued),
      el('td', { class: 'num' }, q.oldest ? age(q.oldest_age_seconds) : '–'), el('td', { class: 'num' }, q.dead_letters)));
    queueRows.replaceChildren(...(rows.length ? rows : empty(4, r, 'no async jobs queued, and no dead letters')));
  }
  function showDead(r) {
    const rows = ((r && r.ok && r.json && r.json.items) || []).slice().reverse().map(d => el('tr', { 'data-job': d.job },
      el('td', { class: 'num' }, d.seq), el('td', { title: d.at }, String(d.at || '').replace('T', ' ').replace(/\.\d+/, '')), el('td', {}, d.api + (d.tier && d.tier !== 'api' ? '@' + d.tier : '')),
      el('td', {}, d.job), el('td', {}, d.app || '–'), el('td', {}, d.reason), el('td', { class: 'num' }, d.attempts), el('td', {}, d.error || '–'),
      el('td', { class: 'actions' }, el('button', { type: 'button', need: 'operator', class: 'replay', 'data-seq': d.seq, title: 'send the job again (an operator\'s)', onclick: ev => replay(d, ev.currentTarget) }, 'Replay'),
        el('button', { type: 'button', need: 'operator', class: 'dead-request', 'data-seq': d.seq, title: 'its request, body included (an operator\'s)', onclick: () => showRequest(d) }, 'Request'))));
    deadRows.replaceChildren(...(rows.length ? rows : empty(9, r, 'no dead letters')));
  }
  async function refresh() {
    try {
      const [q, d] = await Promise.all([api('GET', '/v1/jobs/queues'), api('GET', '/v1/deadletters?limit=200')]);
      if (g !== gen) return;
      showQueues(q);
      showDead(d);
    } catch { /* signed out */ }
  }
  async function replay(d, button) {
    button.disabled = true;
    const r = await api('POST', '/v1/deadletters/' + encodeURIComponent(d.seq) + '/replay');
    if (!r.ok) { button.disabled = false; msg.replaceChildren(el('p', { class: 'error' }, errorText(r))); return; }
    msg.replaceChildren(el('p', { class: 'notice', id: 'replayed' }, 'Job ' + d.job + ' of ' + d.api + ' sent again: pending at ' + ((r.json && r.json.location) || '') + '.'));
    refresh();
  }
  // A dead letter's request (GET /v1/deadletters/{seq}), shown as text.
  const detail = el('div', { id: 'dead-letter' });
  async function showRequest(d) {
    const r = await api('GET', '/v1/deadletters/' + encodeURIComponent(d.seq));
    detail.replaceChildren(r.ok ? el('div', {}, el('p', { class: 'muted' }, 'Dead letter ' + d.seq + ' (job ' + d.job + '):'), el('pre', { class: 'diff', id: 'dead-letter-json' }, pretty(r.json)))
      : el('p', { class: 'error' }, errorText(r)));
  }
  // A job's status by its id (GET /v1/jobs/{id}), as its caller reads it.
  const jobID = el('input', { need: 'operator', type: 'text', id: 'job-id', placeholder: 'job id (from a 202\'s Location)' });
  const jobOut = el('div', { id: 'job-status' });
  async function lookUp() {
    const id = jobID.value.trim().replace(/^.*\/_jetway\/jobs\//, '');
    if (!id) return;
    const r = await api('GET', '/v1/jobs/' + encodeURIComponent(id));
    jobOut.replaceChildren(r.ok ? el('pre', { class: 'diff', id: 'job-status-json' }, pretty(r.json)) : el('p', { class: 'error', id: 'job-status-error' }, errorText(r)));
  }
  // Purge the dead letters of one API, or all (an admin's): two clicks.
  const purgeAPI = el('input', { need: 'admin', type: 'text', id: 'purge-api', placeholder: 'API (empty: every API)' });
  const purgeMsg = el('div', { id: 'purge-status' });
  const purgeButton = el('button', { type: 'button', need: 'admin', class: 'danger', id: 'purge', onclick: async () => {
    const only = purgeAPI.value.trim();
    if (!purgeButton.dataset.armed) {
      purgeButton.dataset.armed = '1';
      purgeButton.textContent = 'Remove every dead letter of ' + (only || 'every API') + '? Click again';
      return;
    }
    delete purgeButton.dataset.armed;
    purgeButton.textContent = 'Purge dead letters';
    const r = await api('DELETE', '/v1/deadletters' + (only ? '?api=' + encodeURIComponent(only) : ''));
    purgeMsg.replaceChildren(r.ok ? el('p', { class: 'notice', id: 'purged' }, 'Removed ' + ((r.json && r.json.removed) || 0) + ' dead letter(s) of ' + (only || 'every API') + '.')
      : el('p', { class: 'error', id: 'purge-error' }, errorText(r)));
    refresh();
  } }, 'Purge dead letters');
  purgeAPI.addEventListener('input', () => { delete purgeButton.dataset.armed; purgeButton.textContent = 'Purge dead letters'; });
  showQueues(queues);
  showDead(dead);
  if (!show(g, el('h1', {}, 'Jobs'),
    el('section', {}, el('h2', {}, 'Queues'), el('table', {}, el('thead', {}, el('tr', {}, ['API', 'queued', 'oldest', 'dead letters'].map(h => el('th', {}, h)))), queueRows)),
    el('section', {}, el('h2', {}, 'A job\'s status'), el('div', { class: 'row' }, jobID, el('button', { type: 'button', need: 'operator', id: 'job-lookup', onclick: lookUp }, 'Look up')), jobOut),
    el('section', {}, el('h2', {}, 'Dead letters'), el('p', { class: 'muted' }, 'The newest 200, newest first: jobs that ended without success. Replay sends one again, pending at the same address with no attempts spent.'),
      msg, el('table', {}, el('thead', {}, el('tr', {}, ['seq', 'at', 'API', 'job', 'app', 'reason', 'attempts', 'last error', ''].map(h => el('th', {}, h)))), deadRows), detail,
      el('h2', {}, 'Purge'), el('div', { class: 'row' }, purgeAPI, purgeButton, el('span', { class: 'muted' }, 'an admin\'s; recorded in the audit trail')), purgeMsg))) return;
  const timer = setInterval(refresh, 5000);
  leave.push(() => clearInterval(timer));
}

// armed is a button that acts on its second click: the first asks.
function armed(attrs, label, ask, act) {
  const b = el('button', { type: 'button', ...attrs, onclick: () => {
    if (!b.dataset.armed) { b.dataset.armed = '1'; b.textContent = ask; return; }
    act(b);
  } }, label);
  return b;
}

// alertsScreen: the alert rules (docs/operations.md#alerts), each with
// its revision; the editor puts one (a new name creates it, a known one
// is changed at the revision listed) and a rule is deleted at its
// revision. Writing one is an admin's: a rule may name a webhook.
async function alertsScreen(g) {
  const r = await api('GET', '/v1/alerts');
  if (!r.ok) { show(g, el('p', { class: 'error' }, errorText(r))); return; }
  const items = (r.json && r.json.items) || [];
  const { editor, status, save } = namedEditor('alert', '/v1/alerts/', items, { name: 'orders-errors', kind: 'success_rate_below', api: 'orders.get', threshold: 0.99, window: '1m' });
  async function remove(it) {
    const w = await api('DELETE', '/v1/alerts/' + encodeURIComponent(it.name), { headers: { 'If-Match': '"' + it.revision + '"' } });
    if (!w.ok) { status.replaceChildren(el('p', { class: 'error', id: 'alert-error' }, errorText(w))); return; }
    route();
  }
  const condition = a => a.threshold ? 'success rate below ' + a.threshold : a.latency ? 'p99 above ' + a.latency : a.jobs ? 'queue above ' + a.jobs
    : a.age ? 'oldest job above ' + a.age : a.dead_letters ? 'dead letters above ' + a.dead_letters : '';
  const rows = items.map(it => { const a = it.rule || {};
    return el('tr', { 'data-alert': it.name }, el('td', {}, it.name, it.error ? el('span', { class: 'tag bad', title: it.error }, 'invalid') : ''), el('td', {}, a.kind || ''),
      el('td', {}, a.api || a.pool || ''), el('td', {}, condition(a)), el('td', {}, a.window || ''), el('td', {}, a.webhook ? 'yes' : '–'), el('td', { class: 'num' }, it.revision),
      el('td', { class: 'actions' }, it.rule ? el('button', { type: 'button', need: 'admin', class: 'alert-edit', onclick: () => { editor.value = pretty(it.rule); editor.focus(); } }, 'edit') : '',
        armed({ need: 'admin', class: 'danger alert-delete', 'data-alert': it.name }, 'delete', 'delete ' + it.name + '?', () => remove(it))));
  });
  show(g, el('h1', {}, 'Alert rules'),
    el('section', {}, table(['rule', 'kind', 'watches', 'when', 'window', 'webhook', 'revision', ''], rows.length ? rows : [el('tr', {}, el('td', { colspan: 8, class: 'muted' }, 'no alert rules'))])),
    el('section', {}, el('h2', {}, 'Put a rule'), editor, el('div', { class: 'row' }, el('button', { type: 'button', need: 'admin', class: 'primary', id: 'alert-save', onclick: save }, 'Save'),
      el('span', { class: 'muted' }, 'a new name creates it; a known one is changed at the revision listed (an admin\'s)')), status));
}

const pct3 = v => Number(v || 0).toFixed(3) + ' %';
const ms1 = v => Number(v || 0).toFixed(1) + ' ms';
const worst = w => w ? pct3(w.availability_percent) + ' at ' + when(w.start) : '–';

// reportView draws a report as GET /v1/reports?format=json answers it,
// the tables of `jetway report`.
function reportView(rep) {
  const none = cols => [el('tr', {}, el('td', { colspan: cols, class: 'muted' }, 'None.'))];
  const tbl = (id, heads, rows) => el('table', { id }, el('thead', {}, el('tr', {}, heads.map(h => el('th', {}, h)))), el('tbody', {}, rows.length ? rows : none(heads.length)));
  const n = v => el('td', { class: 'num' }, v);
  const t = rep.total || {};
  const out = [el('h2', { id: 'report-period' }, 'SLA report ' + when(rep.from) + ' — ' + when(rep.until) + (rep.filter ? ' (' + rep.filter + ')' : '')),
    el('p', { class: 'muted' }, rep.rule + '. Target: ' + pct3(rep.target_percent) + ' per window.')];
  for (const note of rep.notes || []) out.push(el('p', { class: 'error' }, note));
  if (rep.note) out.push(el('p', { class: 'notice', id: 'report-note' }, rep.note));
  out.push(el('p', {}, 'Records: ' + rep.records + ' API-minutes from ' + rep.nodes + ' node(s).'),
    el('h3', {}, 'Summary'),
    tbl('report-summary', ['calls', 'succeeded', 'gateway failures', 'backend failures', 'refused', 'availability', 'windows below', 'worst window', 'p50', 'p90', 'p99', 'p99.9', 'breakers'],
      [el('tr', {}, n(t.calls), n(t.succeeded), n(t.gateway_failures), n(t.backend_failures), n(t.refused), n(pct3(t.availability_percent)), n(t.windows_below_target + ' of ' + t.windows),
        el('td', {}, worst(t.worst_window)), n(ms1(t.p50_ms)), n(ms1(t.p90_ms)), n(ms1(t.p99_ms)), n(ms1(t.p999_ms)), n(t.breakers_opened))]),
    el('h3', {}, 'By owner'),
    tbl('report-owners', ['owner', 'APIs', 'calls', 'availability', 'windows below', 'worst window', 'p99', 'breakers'], (rep.owners || []).map(o => el('tr', {},
      el('td', {}, o.owner), el('td', {}, (o.apis || []).join(', ')), n(o.calls), el('td', { class: 'num' + (o.windows_below_target ? ' error' : '') }, pct3(o.availability_percent)),
      n(o.windows_below_target + ' of ' + o.windows), el('td', {}, worst(o.worst_window)), n(ms1(o.p99_ms)), n(o.breakers_opened)))),
    el('h3', {}, 'By API'),
    tbl('report-apis', ['API', 'owner', 'calls', 'succeeded', 'gateway failures', 'backend failures', 'refused', 'availability', 'windows below', 'p50', 'p99', 'p99.9', 'breakers', 'changed on'],
      (rep.apis || []).map(a => el('tr', { 'data-api': a.api }, el('td', {}, a.api), el('td', {}, a.owner), n(a.calls), n(a.succeeded), n(a.gateway_failures), n(a.backend_failures), n(a.refused),
        el('td', { class: 'num' + (a.windows_below_target ? ' error' : '') }, pct3(a.availability_percent)), n(a.windows_below_target + ' of ' + a.windows),
        n(ms1(a.p50_ms)), n(ms1(a.p99_ms)), n(ms1(a.p999_ms)), n(a.breakers_opened), el('td', {}, (a.changed_on || []).join(', ') || '–')))),
    el('h3', {}, 'Slowest APIs (p99 over the period)'),
    tbl('report-slowest', ['API', 'owner', 'p99', 'p99.9', 'calls'], (rep.slowest || []).map(a => el('tr', {}, el('td', {}, a.api), el('td', {}, a.owner), n(ms1(a.p99_ms)), n(ms1(a.p999_ms)), n(a.calls)))),
    el('h3', {}, 'Windows below ' + pct3(rep.target_percent)),
    tbl('report-below', ['window (5 min)', 'API', 'owner', 'calls counted', 'succeeded', 'availability'], (rep.windows_below_target || []).map(w => el('tr', {},
      el('td', {}, when(w.start)), el('td', {}, w.api || ''), el('td', {}, w.owner || ''), n(w.sla_calls), n(w.succeeded), el('td', { class: 'num error' }, pct3(w.availability_percent))))),
    el('h3', {}, 'Errors by code'),
    tbl('report-errors', ['API', 'code', 'kind', 'whose', 'calls'], (rep.errors || []).map(e => el('tr', {}, el('td', {}, e.api), el('td', {}, e.code), el('td', {}, e.kind), el('td', {}, e.cause), n(e.count)))),
    el('h3', {}, 'Breakers opened'),
    tbl('report-breakers', ['at', 'API', 'owner', 'worker', 'reason'], (rep.breakers_opened || []).map(b => el('tr', {}, el('td', {}, when(b.at)), el('td', {}, b.api), el('td', {}, b.owner), el('td', {}, b.worker), el('td', {}, b.reason || '')))),
    el('h3', {}, 'Switches flipped'),
    tbl('report-switches', ['at', 'switch', 'on/off', 'API', 'owner', 'by'], (rep.switches_flipped || []).map(c => el('tr', {}, el('td', {}, when(c.at)), el('td', {}, c.kind), el('td', {}, c.action), el('td', {}, c.api), el('td', {}, c.owner), el('td', {}, c.actor)))),
    el('h3', {}, 'Registry changes'),
    tbl('report-changes', ['at', 'action', 'API', 'owner', 'by'], (rep.registry_changes || []).map(c => el('tr', {}, el('td', {}, when(c.at)), el('td', {}, c.action), el('td', {}, c.api), el('td', {}, c.owner), el('td', {}, c.actor)))));
  return out;
}

// reportsScreen: the SLA report of a period (GET /v1/reports, as `jetway
// report` builds it), its HTML page downloaded over fetch — the token in
// a header, never in a URL — and the owners' report schedules, written
// and deleted at their revision (an admin's).
async function reportsScreen(g) {
  const [apis, scheds] = await Promise.all([api('GET', '/v1/apis'), api('GET', '/v1/reports/schedules')]);
  const names = ((apis.ok && apis.json && apis.json.items) || []).map(it => it.name).filter(n => !n.startsWith('draft.'));
  const since = el('input', { type: 'text', class: 'short', id: 'report-since', value: '24h', size: 12, title: 'a duration back from now (24h, 7d), a date (2006-01-02) or an RFC 3339 time' });
  const until = el('input', { type: 'text', class: 'short', id: 'report-until', placeholder: 'now', size: 12 });
  const which = el('select', { id: 'report-api' }, el('option', { value: '' }, 'every API'), names.map(n => el('option', { value: n }, n)));
  const owner = el('input', { type: 'text', id: 'report-owner', placeholder: 'every owner (unowned: none named)' });
  const target = el('input', { type: 'text', class: 'short', id: 'report-target', value: '99.99', size: 6 });
  const out = el('div', { id: 'report' });
  const dl = el('div', { id: 'report-download-status' });
  function query(format) {
    const p = new URLSearchParams({ since: since.value.trim() || '24h', target: target.value.trim() || '99.99', format });
    if (until.value.trim()) p.set('until', until.value.trim());
    if (which.value) p.set('api', which.value);
    if (owner.value.trim()) p.set('owner', owner.value.trim());
    return '/v1/reports?' + p;
  }
  async function build() {
    out.replaceChildren(el('p', { class: 'muted' }, 'Building the report…'));
    const r = await api('GET', query('json'));
    if (g !== gen) return;
    out.replaceChildren(...(r.ok ? reportView(r.json) : [el('p', { class: 'error', id: 'report-error' }, errorText(r))]));
  }
  async function download() {
    dl.replaceChildren();
    const r = await fetch(query('html'), { headers: { Authorization: 'Bearer ' + token() } });
    if (!r.ok) {
      let j = null; const text = await r.text();
      try { j = JSON.parse(text); } catch { /* not JSON */ }
      dl.replaceChildren(el('p', { class: 'error' }, errorText({ status: r.status, json: j, text })));
      return;
    }
    // As bytes, never as text/html: a blob: URL is of the console's
    // origin, and opened it would render without the report's policy.
    const href = URL.createObjectURL(new Blob([await r.arrayBuffer()], { type: 'application/octet-stream' }));
    const a = el('a', { href, download: 'sla-report-' + (since.value.trim() || '24h').replace(/[^A-Za-z0-9-]/g, '_') + '.html' });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(href), 60000);
    dl.replaceChildren(el('p', { class: 'notice', id: 'report-downloaded' }, 'The HTML report is downloaded.'));
  }

  // The schedules.
  const items = (scheds.ok && scheds.json && scheds.json.items) || [];
  const byOwner = new Map(items.map(it => [it.owner, it]));
  const editor = el('textarea', { need: 'admin', id: 'schedule-entry', spellcheck: 'false' });
  editor.value = pretty({ owner: 'Team Payments', every: 'weekly', weekday: 'monday', at: '07:00', format: 'html', webhook: { url: 'https://hooks.example.com/sla' } });
  const status = el('div', { id: 'schedule-status' });
  async function save() {
    status.replaceChildren();
    let doc;
    try { doc = JSON.parse(editor.value); } catch (e) { status.append(el('p', { class: 'error' }, 'Not JSON: ' + e.message)); return; }
    const known = byOwner.get(String(doc.owner || ''));
    const w = await api('PUT', '/v1/reports/schedules/' + encodeURIComponent(String(doc.owner || '')), { body: doc, headers: known ? { 'If-Match': '"' + known.revision + '"' } : { 'If-None-Match': '*' } });
    if (!w.ok) { status.append(el('p', { class: 'error', id: 'schedule-error' }, errorText(w))); return; }
    route();
  }
  async function remove(it) {
    const w = await api('DELETE', '/v1/reports/schedules/' + encodeURIComponent(it.owner), { headers: { 'If-Match': '"' + it.revision + '"' } });
    if (!w.ok) { status.replaceChildren(el('p', { class: 'error', id: 'schedule-error' }, errorText(w))); return; }
    route();
  }
  const rows = items.map(it => { const sc = it.schedule || {}, d = it.delivery;
    const to = [sc.webhook && sc.webhook.url, sc.smtp && (sc.smtp.to || []).join(', ')].filter(Boolean).join('; ');
    return el('tr', { 'data-owner': it.owner }, el('td', {}, it.owner), el('td', {}, sc.every + (sc.weekday ? ' (' + sc.weekday + ')' : '')), el('td', {}, sc.at + ' UTC'), el('td', {}, sc.format),
      el('td', {}, to), el('td', {}, d ? d.state + ' (' + when(d.due) + ')' : '–'), el('td', {}, d ? when(d.last_sent) : '–'), el('td', { class: 'error' }, (d && d.last_error) || ''),
      el('td', { class: 'num' }, it.revision),
      el('td', { class: 'actions' }, el('button', { type: 'button', need: 'admin', class: 'schedule-edit', onclick: () => { editor.value = pretty(sc); editor.focus(); } }, 'edit'),
        armed({ need: 'admin', class: 'danger schedule-delete', 'data-owner': it.owner }, 'delete', 'delete ' + it.owner + '\'s?', () => remove(it))));
  });
  const schedTable = scheds.ok ? table(['owner', 'every', 'at', 'format', 'to', 'last due', 'last sent', 'last error', 'revision', ''], rows.length ? rows : [el('tr', {}, el('td', { colspan: 10, class: 'muted' }, 'no schedules'))])
    : el('p', { class: 'error' }, errorText(scheds));
  if (!show(g, el('h1', {}, 'SLA reports'),
    el('section', {}, el('div', { class: 'row' }, 'From ', since, ' until ', until, which, owner, ' target ', target, ' % ',
      el('button', { type: 'button', class: 'primary', id: 'report-show', onclick: build }, 'Show'),
      el('button', { type: 'button', id: 'report-download', onclick: download }, 'Download the HTML report')), dl, out),
    el('section', {}, el('h2', {}, 'Schedules'), el('p', { class: 'muted' }, 'Each owner\'s report, sent daily or weekly by webhook or mail (docs/reports.md). A webhook\'s URL is shown without its path and query; saved so, the stored URL stays.'),
      schedTable, el('h2', {}, 'Put a schedule'), editor, el('div', { class: 'row' }, el('button', { type: 'button', need: 'admin', class: 'primary', id: 'schedule-save', onclick: save }, 'Save'),
        el('span', { class: 'muted' }, 'a new owner creates one; a known one is changed at the revision listed (an admin\'s)')), status))) return;
  build();
}

// age is a number of seconds, short.
function age(s) {
  if (s < 60) return Math.round(s) + ' s';
  if (s < 3600) return Math.round(s / 60) + ' min';
  if (s < 172800) return (s / 3600).toFixed(1) + ' h';
  return Math.round(s / 86400) + ' d';
}

async function nodes(g) {
  const r = await api('GET', '/v1/nodes');
  if (!r.ok) { show(g, el('p', { class: 'error' }, errorText(r))); return; }
  const rows = ((r.json && r.json.items) || r.json || []).map(n => el('tr', { 'data-node': n.id }, el('td', {}, n.id), el('td', {}, n.role), el('td', {}, (n.pools || []).join(', ')),
    el('td', { class: 'site' }, n.site ? el('span', { class: 'tag ' + (n.site === 'standby' ? 'warn' : 'ok') }, n.site) : '–'),
    el('td', {}, n.version || ''), el('td', { class: 'num' }, n.wire || 1), el('td', {}, n.host || ''), el('td', { class: 'num' }, n.in_flight), el('td', { class: 'num' }, Math.round(n.uptime_seconds) + ' s'), el('td', {}, n.at)));
  show(g, el('h1', {}, 'Nodes'), el('section', {}, table(['id', 'role', 'pools', 'site', 'version', 'wire', 'host', 'in flight', 'up', 'last beat'], rows)));
}

async function audit(g) {
  const r = await api('GET', '/v1/audit?limit=200');
  if (!r.ok) { show(g, el('p', { class: 'error' }, errorText(r))); return; }
  const rows = ((r.json && r.json.items) || []).slice().reverse().map(c => el('tr', {}, el('td', {}, c.at), el('td', {}, c.actor), el('td', {}, c.action),
    el('td', {}, c.kind), el('td', {}, c.key), el('td', { class: 'num' }, c.revision || '')));
  show(g, el('h1', {}, 'Audit trail'), el('section', {}, table(['when', 'who', 'did', 'kind', 'key', 'revision'], rows)));
}

// --- routing -------------------------------------------------------------

function stopScreen() { for (const f of leave) f(); leave = []; }

async function route() {
  stopScreen();
  if (!token()) { login(); return; }
  document.getElementById('bar').hidden = false;
  const g = ++gen;
  try {
    if (!me) {
      const w = await api('GET', '/v1/whoami');
      if (w.ok && w.json) me = w.json;
      document.getElementById('whoami').textContent = me ? me.name + ' (' + me.role + ')' : '';
      if (g !== gen) return;
    }
    const h = decodeURIComponent(location.hash.replace(/^#\/?/, ''));
    if (h.startsWith('api/')) {
      const name = h.slice(4);
      if (!/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(name)) throw new Error('no API is named ' + JSON.stringify(name));
      await apiScreen(g, name);
    } else if (h === 'apps') await apps(g);
    else if (h === 'push') await pushScreen(g);
    else if (h === 'jobs') await jobsScreen(g);
    else if (h === 'reports') await reportsScreen(g);
    else if (h === 'alerts') await alertsScreen(g);
    else if (h === 'nodes') await nodes(g);
    else if (h === 'audit') await audit(g);
    else await cluster(g);
  } catch (e) {
    if (e.message !== 'unauthenticated') show(g, el('p', { class: 'error' }, 'The console failed: ' + e.message));
  }
}

document.getElementById('signout').addEventListener('click', () => signOut());
window.addEventListener('hashchange', route);
route();

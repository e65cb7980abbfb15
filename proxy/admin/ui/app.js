// ctxproxy status page. It polls the admin API (GET /ctxproxy/status and
// /ctxproxy/sessions, and for the open session /ctxproxy/sessions/{id} and
// its snapshots) and renders what it gets.
//
// Every string from the API is client data (session ids, model names,
// metadata): it reaches the page through textContent and Text nodes only,
// never as HTML.
'use strict';
(() => {
  const REFRESH_MS = 3000;
  const TOKEN_KEY = 'ctxproxy.adminToken';
  // Seed 000's warning texts, as the proxy sends them in X-Ctxproxy-Warning.
  const WARN80 = 'Context at 80% capacity. Consider /clear or /save.';
  const WARN90 = 'Context at 90% capacity. Auto-trimming soon.';

  const $ = (id) => document.getElementById(id);

  // el builds an element. Children that are strings become Text nodes.
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c !== undefined && c !== null) e.append(c);
    }
    return e;
  }

  function setText(id, v) {
    $(id).textContent = v === undefined || v === null || v === '' ? '–' : String(v);
  }

  // Formatting.
  const num = (n) => (typeof n === 'number' && isFinite(n) ? n.toLocaleString() : '–');
  const pct = (f, digits = 0) => (typeof f === 'number' && isFinite(f) ? (f * 100).toFixed(digits) + '%' : '–');
  function bytes(n) {
    if (typeof n !== 'number' || !isFinite(n)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + ' ' + units[i];
  }
  function duration(s) {
    if (typeof s !== 'number' || !isFinite(s) || s < 0) return '–';
    s = Math.floor(s);
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }
  function ago(iso) {
    const t = Date.parse(iso);
    if (!isFinite(t)) return '–';
    const s = Math.max(0, (Date.now() - t) / 1000);
    return s < 5 ? 'just now' : duration(s) + ' ago';
  }
  function when(iso) {
    const t = Date.parse(iso);
    return isFinite(t) ? new Date(t).toLocaleString() : '–';
  }
  // level maps a usage fraction to a colour class.
  function level(f) {
    if (!(f >= 0)) return '';
    if (f >= 0.9) return 'bad';
    if (f >= 0.8) return 'warn';
    return f >= 0.6 ? '' : 'ok';
  }

  // Admin token: kept in localStorage, sent as a Bearer token. A link may
  // carry it in the fragment (#token=…), which never reaches a server; it
  // is stored and removed from the address bar at once.
  let memoryToken = '';
  function token() {
    try { return localStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; }
  }
  function setToken(t) {
    try {
      if (t) localStorage.setItem(TOKEN_KEY, t); else localStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage off: the token lasts for this page only */ }
    memoryToken = t;
  }
  const currentToken = () => token() || memoryToken;

  function hashParams() { return new URLSearchParams(location.hash.replace(/^#/, '')); }
  function setHash(params) {
    const s = params.toString();
    history.replaceState(null, '', s ? '#' + s : location.pathname + location.search);
  }

  class APIError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(path) {
    const headers = { Accept: 'application/json' };
    const t = currentToken();
    if (t) headers.Authorization = 'Bearer ' + t;
    let resp;
    try {
      resp = await fetch(path, { headers, cache: 'no-store' });
    } catch (e) {
      throw new APIError(0, 'cannot reach ctxproxy (' + e.message + ')');
    }
    if (!resp.ok) {
      let msg = resp.status + ' ' + resp.statusText;
      try {
        const j = await resp.json();
        if (j && typeof j.error === 'string') msg = j.error;
        else if (j && j.error && typeof j.error.message === 'string') msg = j.error.message;
      } catch (e) { /* not JSON */ }
      throw new APIError(resp.status, msg);
    }
    return resp.json();
  }

  function showBanner(err) {
    const b = $('banner');
    let text;
    if (err.status === 401) {
      text = 'The admin API needs the token (admin.token): enter it above. (' + err.message + ')';
    } else if (err.status === 403 || err.status === 404) {
      text = 'The admin API is not available (' + err.message + '). It is off when ctxproxy listens ' +
        'beyond loopback without admin.token set.';
    } else if (err.status === 0) {
      text = 'Cannot reach ctxproxy: ' + err.message + '. Retrying.';
    } else {
      text = 'The admin API answered ' + err.status + ': ' + err.message;
    }
    b.textContent = text;
    b.hidden = false;
  }
  function hideBanner() { $('banner').hidden = true; }

  // Overview cards.
  function renderStatus(s) {
    setText('version', (s.version ? 'version ' + s.version : '') + (s.replica ? ' · replica ' + s.replica : ''));
    setText('uptime', duration(s.uptime_seconds));
    const be = s.backend || {};
    setText('backend-url', be.url);
    setText('backend-kind', be.kind);
    setText('backend-state', be.ready ? 'Ready' : 'Not answering');
    $('backend-dot').className = 'dot ' + (be.ready ? 'ok' : 'bad');

    const g = s.gpu || {};
    const used = g.total > 0 ? g.used / g.total : NaN;
    const gauge = $('gauge');
    gauge.style.setProperty('--pct', isFinite(used) ? (used * 100).toFixed(1) : '0');
    const lvl = { normal: 'ok', ok: 'ok', compress: 'warn', shrink: 'warn', emergency: 'bad' }[g.level] || '';
    gauge.style.setProperty('--col', lvl === 'bad' ? 'var(--bad)' : lvl === 'warn' ? 'var(--warn)' : 'var(--accent)');
    gauge.setAttribute('aria-label', 'memory in use: ' + pct(used));
    setText('gauge-pct', pct(used));
    setText('mem-used', bytes(g.used));
    setText('mem-total', bytes(g.total));
    setText('mem-probe', g.probe);
    const lv = $('mem-level');
    lv.textContent = g.level || '–';
    lv.className = 'badge ' + lvl;
    $('devices').replaceChildren(...(g.devices || []).map((d, i) =>
      el('li', null, el('span', { text: (d.name || d.vendor || 'device ' + i) }),
        el('span', { text: bytes(d.used) + ' / ' + bytes(d.total) }))));

    const st = s.strategy || {};
    setText('strategy-mode', st.mode);
    setText('strategy-threshold', pct(st.threshold) + ' of the window');
    setText('strategy-target', pct(st.target));
    setText('strategy-overflow', st.on_overflow);
    const eff = st.effective_threshold;
    setText('strategy-effective', typeof eff === 'number' && eff !== st.threshold
      ? pct(eff) + ' (lowered under memory pressure)' : pct(eff));
    $('mark-target').style.left = clampPct(st.target) + '%';
    $('mark-threshold').style.left = clampPct(eff || st.threshold) + '%';

    setText('session-count', num(s.sessions));
    setText('inflight', num(s.inflight));
    const c = s.context || {};
    let ctxMode = '';
    if (c.auto === true) {
      ctxMode = 'auto from free memory (' + num(c.min_size) + '–' + num(c.max_size) + ', KV ' + (c.kv_quantization || '?') + ')';
    } else if (c.auto === false) {
      ctxMode = 'fixed at ' + num(c.target_size);
    }
    setText('ctx-mode', ctxMode);
    const sn = s.snapshots || {};
    setText('snap-store', sn.store ? sn.store + ', auto at ' + pct(sn.auto_threshold) + ', keep ' + num(sn.max_count) : '');
    const su = s.summarize || {};
    setText('summarizer', su.model ? su.model + ' (keeps ' + num(su.keep_recent) + ' recent)' : 'off');

    renderModels(s.models || []);
    renderBackends(s.backends || []);
  }

  // renderBackends lists the servers behind ctxproxy; the status has
  // them only when there are several.
  function renderBackends(servers) {
    const rows = servers.map((b) => {
      const state = b.up ? 'up' : 'down' + (b.down_until ? ' until ' + when(b.down_until) : '');
      const g = b.gpu;
      return el('tr', null,
        el('td', { class: 'mono', text: b.name }),
        el('td', { class: 'mono', text: b.url }),
        el('td', { text: (b.kind || '–') + (b.version ? ' ' + b.version : '') }),
        el('td', { title: b.last_error || undefined },
          el('span', { class: 'badge ' + (b.up ? 'ok' : 'bad'), text: state }),
          b.last_error ? el('span', { class: 'muted', text: ' ' + b.last_error }) : null),
        el('td', { class: 'num', text: num(b.inflight) }),
        el('td', { class: 'num', text: num(b.served) }),
        el('td', { class: 'num', text: num(b.models_listed) + ' (' + num(b.models_loaded) + ')' }),
        el('td', { class: 'mono', text: b.memory || 'none' }),
        el('td', { class: 'num', text: g ? bytes(g.free) + ' / ' + bytes(g.total) + (g.level && g.level !== 'ok' ? ' · ' + g.level : '') : '–' }));
    });
    $('backends').tBodies[0].replaceChildren(...rows);
    $('backends-panel').hidden = rows.length === 0;
  }
  function clampPct(f) { return typeof f === 'number' && isFinite(f) ? Math.min(100, Math.max(0, f * 100)) : 0; }

  function renderModels(models) {
    const rows = models.map((m) => {
      const cal = m.calibration || {};
      return el('tr', null,
        el('td', { class: 'mono', text: m.name }),
        el('td', { class: 'num', text: num(m.max_tokens) }),
        el('td', { class: 'num', text: num(m.effective) }),
        el('td', { class: 'num', text: m.num_ctx ? num(m.num_ctx) : '–' }),
        el('td', { class: 'num', text: m.bytes_per_token ? bytes(m.bytes_per_token) : '–' }),
        el('td', { class: 'num', text: cal.observations ? '×' + Number(cal.ratio).toFixed(3) + ' (' + num(cal.observations) + ')' : '–' }),
        el('td', { class: 'muted', text: m.reason || '' }));
    });
    $('models').tBodies[0].replaceChildren(...rows);
    $('models-empty').hidden = rows.length > 0;
  }

  // usageBar is a bar of tokens against the limit. When ctxproxy cut the
  // conversation it shows two numbers, each named: as sent, and what was
  // forwarded (the bar and its colour follow what the model saw).
  function usageBar(tokens, limit, usage, sent, forwarded) {
    const f = typeof usage === 'number' ? usage : limit > 0 ? tokens / limit : NaN;
    const cut = sent > 0 && sent !== tokens && typeof forwarded === 'number';
    const shown = cut ? forwarded : f;
    const fill = el('div', { class: 'bar-fill ' + level(shown) });
    fill.style.width = clampPct(shown) + '%';
    const text = cut
      ? num(tokens) + ' as sent · ' + pct(f) + ' → ' + num(sent) + ' forwarded · ' + pct(forwarded)
      : num(tokens) + ' / ' + num(limit) + ' · ' + pct(f);
    const title = cut
      ? 'as sent: ' + pct(f, 1) + ' of the effective limit; forwarded after cutting: ' + pct(forwarded, 1)
      : pct(f, 1) + ' of the effective limit';
    return el('div', { class: 'bar', title: title },
      el('div', { class: 'bar-track' }, fill),
      el('span', { class: 'bar-label', text: text }));
  }

  function warningBadges(usage, extra) {
    const out = [];
    if (usage >= 0.9) out.push(el('span', { class: 'badge bad', title: WARN90, text: '≥ 90%' }));
    else if (usage >= 0.8) out.push(el('span', { class: 'badge warn', title: WARN80, text: '≥ 80%' }));
    if (extra) out.push(extra);
    return out;
  }

  // cutBadge marks a conversation ctxproxy cut to fit: sent over the
  // limit, forwarded under it, the bar alone would look calm.
  function cutBadge(s) {
    if (!(s.sent > 0 && s.sent !== s.tokens)) return null;
    return el('span', { class: 'badge cut',
      title: 'ctxproxy cut this conversation to fit: ' + num(s.tokens) + ' tokens as sent (' + pct(s.usage) +
        ' of the limit), ' + num(s.sent) + ' forwarded (' + pct(s.forwarded_usage) + ')',
      text: 'cut' });
  }

  let sessions = [];
  const rowSession = new WeakMap(); // table row → session id
  let selected = null;

  function renderSessions() {
    const q = $('filter').value.trim().toLowerCase();
    // Keep the keyboard focus on its session across the refresh.
    const focused = rowSession.get(document.activeElement);
    const shown = sessions.filter((s) => !q ||
      String(s.session_id).toLowerCase().includes(q) || String(s.model || '').toLowerCase().includes(q));
    const rows = shown.map((s) => {
      const tr = el('tr', { tabindex: '0', 'aria-label': 'session ' + s.session_id },
        el('td', { class: 'id mono', title: s.session_id, text: s.session_id }),
        el('td', { class: 'mono', text: s.model || '–' }),
        el('td', null, usageBar(s.tokens, s.limit, s.usage, s.sent, s.forwarded_usage)),
        el('td', { title: when(s.updated), text: ago(s.updated) }),
        el('td', { class: 'num', text: num(s.messages) }),
        el('td', { class: 'num', text: num(s.snapshots) }),
        el('td', null, ...warningBadges(typeof s.forwarded_usage === 'number' ? s.forwarded_usage : s.usage, cutBadge(s))));
      rowSession.set(tr, s.session_id);
      if (s.session_id === selected) tr.classList.add('selected');
      tr.addEventListener('click', () => open(s.session_id));
      tr.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); open(s.session_id); }
      });
      return tr;
    });
    $('sessions').tBodies[0].replaceChildren(...rows);
    if (focused !== undefined) {
      const again = rows.find((tr) => rowSession.get(tr) === focused);
      if (again) again.focus();
    }
    const empty = $('sessions-empty');
    empty.hidden = rows.length > 0;
    empty.textContent = sessions.length > 0
      ? 'No session matches the filter.'
      : 'No sessions yet. Send a chat request through ctxproxy and it appears here.';
  }

  // Session detail.
  function stat(label, value) {
    return el('div', { class: 'stat' }, el('b', { text: value }), el('span', { text: label }));
  }

  async function renderDetail(id) {
    const base = 'sessions/' + encodeURIComponent(id);
    let sess, snaps;
    try {
      [sess, snaps] = await Promise.all([api(base), api(base + '/snapshots')]);
    } catch (e) {
      if (e.status === 404) {
        $('detail-warning').textContent = 'This session no longer exists.';
        $('detail-warning').hidden = false;
        return;
      }
      throw e;
    }
    if (selected !== id) return; // another session was opened meanwhile
    const st = sess.stats || {};
    $('detail-id').textContent = sess.session_id || id;
    const w = $('detail-warning');
    w.textContent = sess.warning || '';
    w.hidden = !sess.warning;
    const meta = [
      el('span', null, 'Model ', el('b', { class: 'mono', text: sess.model || '–' })),
      el('span', { text: 'Created ' + when(sess.created) }),
      el('span', { text: 'Updated ' + when(sess.updated) + ' (' + ago(sess.updated) + ')' }),
    ];
    for (const [k, v] of Object.entries(sess.metadata || {})) {
      meta.push(el('span', null, k + ': ', el('b', { text: typeof v === 'string' ? v : JSON.stringify(v) })));
    }
    $('detail-meta').replaceChildren(...meta);
    $('detail-stats').replaceChildren(
      stat('tokens (as sent)', num(st.tokens)),
      stat('effective limit', num(st.limit)),
      stat('usage', pct(st.usage, 1)),
      stat('tokens forwarded', num(st.sent)),
      stat('prefix kept (prompt cache)', pct(st.prefix_kept)),
      stat('cached (backend, last request)', st.cached_tokens === undefined ? '–' : num(st.cached_tokens)),
      stat('num_ctx', st.num_ctx ? num(st.num_ctx) : '–'),
      stat('messages', num(sess.messages)),
      stat('dropped (last request)', num(st.dropped || 0)),
      stat('summarized (last request)', num(st.summarized || 0)),
      stat('prompt tokens (backend, last request)', num(st.prompt_tokens)),
      stat('completion tokens (last request)', num(st.completion_tokens)),
      stat('requests', num(st.requests || 0)),
      stat('backend truncations' + (st.truncations ? ', last ' + ago(st.last_truncation) : ''), num(st.truncations || 0)));
    const list = (snaps && snaps.snapshots) || [];
    $('snapshots').tBodies[0].replaceChildren(...list.map((sn) => el('tr', null,
      el('td', { class: 'mono', text: sn.id }),
      el('td', { title: when(sn.created), text: ago(sn.created) }),
      el('td', null, el('span', { class: 'badge ' + ({ emergency: 'bad', overflow: 'warn' }[sn.reason] || ''), text: sn.reason || '–' })),
      el('td', { class: 'num', text: num(sn.messages) }),
      el('td', { class: 'num', text: num(sn.tokens) }),
      el('td', { class: 'num', text: pct(sn.usage, 1) }),
      el('td', { class: 'num', text: bytes(sn.bytes) }))));
    $('snapshots-empty').hidden = list.length > 0;
    $('detail').hidden = false;
    if (scrollToDetail) {
      scrollToDetail = false;
      $('detail').scrollIntoView({ behavior: 'smooth', block: 'start' });
    }
  }

  // open shows a session the user picked, and brings its detail into view.
  let scrollToDetail = false;
  function open(id) {
    scrollToDetail = true;
    select(id);
  }

  function select(id) {
    selected = id;
    const p = hashParams();
    if (id === null) p.delete('session'); else p.set('session', id);
    setHash(p);
    if (id === null) {
      $('detail').hidden = true;
      renderSessions();
      return;
    }
    renderSessions();
    renderDetail(id).catch(showBanner);
  }

  // Polling.
  let paused = false;
  let busy = false;

  async function refresh() {
    if (paused || busy || document.hidden) return;
    busy = true;
    try {
      const [status, list] = await Promise.allSettled([api('status'), api('sessions')]);
      let err = null;
      if (status.status === 'fulfilled') renderStatus(status.value); else err = status.reason;
      if (list.status === 'fulfilled') {
        sessions = (list.value && list.value.sessions) || [];
        renderSessions();
      } else {
        err = err || list.reason;
      }
      if (!err && selected !== null) {
        await renderDetail(selected).catch((e) => { err = e; });
      }
      if (err) showBanner(err); else hideBanner();
      $('refreshed').textContent = 'updated ' + new Date().toLocaleTimeString();
    } finally {
      busy = false;
    }
  }

  function init() {
    const p = hashParams();
    if (p.has('token')) {
      setToken(p.get('token'));
      p.delete('token');
      setHash(p);
    }
    $('token').value = currentToken();
    $('token-form').addEventListener('submit', (e) => {
      e.preventDefault();
      setToken($('token').value.trim());
      refresh();
    });
    $('pause').addEventListener('click', () => {
      paused = !paused;
      $('pause').setAttribute('aria-pressed', String(paused));
      $('pause').textContent = paused ? 'Paused' : 'Pause';
      if (!paused) refresh();
    });
    $('filter').addEventListener('input', renderSessions);
    $('detail-close').addEventListener('click', () => select(null));
    window.addEventListener('hashchange', () => {
      const id = hashParams().get('session');
      if (id !== selected) select(id);
    });
    document.addEventListener('visibilitychange', () => { if (!document.hidden) refresh(); });
    const id = p.get('session');
    if (id !== null) select(id);
    refresh();
    setInterval(refresh, REFRESH_MS);
  }

  init();
})();

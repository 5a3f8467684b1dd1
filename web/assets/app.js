// The nqd dashboard: a router over nine pages (flows, a flow, a run,
// triggers and a registered trigger from registry.js, the queues and a queue
// from queues.js, the schedules from schedules.js and the workers from
// workers.js). Each page renders into <main> and returns a function that
// stops its timers and streams when the page is left.
import {h, replace, api, ApiError, enc, onServerState, onAuthNeeded, token, setToken, shortId, duration, ago, clock, badge, json, parseInput, loading, failure, every, debounce, throttle} from './lib.js';
import {diagram} from './diagram.js';
import {queuesPage, queuePage} from './queues.js';
import {schedulesPage} from './schedules.js';
import {workersPage} from './workers.js';
import {registryPanel, triggerPage} from './registry.js';

const base = new URL(document.baseURI).pathname; // "/" or "/ui/"
const main = document.getElementById('main');
const RUN_STATUSES = ['running', 'awaiting', 'completed', 'failed', 'cancelled'];
const ENDED = new Set(['completed', 'failed', 'cancelled']);

// --- router -----------------------------------------------------------------

const routes = [
  [/^$/, flowsPage, 'flows'],
  [/^triggers$/, triggersPage, 'triggers'],
  [/^triggers\/([^/]+)$/, triggerPage, 'triggers'],
  [/^queues$/, queuesPage, 'queues'],
  [/^queues\/([^/]+)$/, queuePage, 'queues'],
  [/^schedules$/, schedulesPage, 'schedules'],
  [/^workers$/, workersPage, 'workers'],
  [/^flows\/([^/]+)$/, flowPage, 'flows'],
  [/^runs\/([^/]+)$/, runPage, 'flows'],
];

let leave = () => {};

function render(focus) {
  leave();
  const path = location.pathname.startsWith(base) ? location.pathname.slice(base.length) : '';
  let page = notFoundPage, section = '', params = [];
  for (const [re, p, s] of routes) {
    const m = path.match(re);
    if (m) { page = p; section = s; params = m.slice(1).map(decodeURIComponent); break; }
  }
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.section === section) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  main.replaceChildren();
  leave = page(main, ...params) || (() => {});
  if (focus) main.focus({preventScroll: true});
}

/** go navigates inside the page without a reload. */
function go(href) {
  history.pushState(null, '', new URL(href, document.baseURI));
  scrollTo(0, 0);
  render(true);
}

document.addEventListener('click', e => {
  const a = e.target.closest('a[href]');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey || a.target || a.hasAttribute('download')) return;
  const url = new URL(a.href);
  if (url.origin !== location.origin || !url.pathname.startsWith(base) || url.pathname.startsWith('/api/')) return;
  if (url.hash && url.pathname === location.pathname) return;
  e.preventDefault();
  go(url.href);
});
addEventListener('popstate', () => render(false));

/** link is an in-page link; paths are relative to the base. */
const link = (path, ...children) => h('a', {href: path}, ...children);
const runHref = id => `runs/${enc(id)}`;
const flowHref = name => `flows/${enc(name)}`;

function title(...parts) { document.title = [...parts, 'nqd'].filter(Boolean).join(' · '); }

// --- shell: theme and server reachability -------------------------------------

const themes = ['auto', 'light', 'dark'];
function applyTheme(t) {
  if (t === 'auto') delete document.documentElement.dataset.theme; else document.documentElement.dataset.theme = t;
  document.getElementById('theme').title = `Theme: ${t}`;
}
let theme = localStorage.getItem('nqd-theme') || 'auto';
applyTheme(theme);
document.getElementById('theme').addEventListener('click', () => {
  theme = themes[(themes.indexOf(theme) + 1) % themes.length];
  localStorage.setItem('nqd-theme', theme);
  applyTheme(theme);
});

const serverEl = document.getElementById('server');
onServerState(ok => {
  serverEl.className = ok ? 'server' : 'server down';
  serverEl.textContent = ok ? '' : 'Server unreachable';
});

// nqd with API tokens configured refuses the page until it has one.
const signOut = document.getElementById('signout');
signOut.hidden = !token();
signOut.addEventListener('click', () => { setToken(''); signOut.hidden = true; render(true); });
onAuthNeeded(() => {
  if (document.getElementById('signin')) return;
  leave();
  leave = () => {};
  const input = h('input', {id: 'token-input', type: 'password', autocomplete: 'current-password', required: true, 'aria-describedby': 'signin-msg'});
  const had = token();
  replace(main, h('form', {class: 'panel signin', id: 'signin', onsubmit: e => {
    e.preventDefault();
    setToken(input.value.trim());
    signOut.hidden = false;
    render(true);
  }},
  h('h1', {}, 'Sign in'),
  h('p', {id: 'signin-msg', class: had ? 'error-text' : 'muted'}, had ? 'nqd refused that token. Try another one.' : 'This nqd requires an API token with the read scope (write to start runs, admin to cancel them).'),
  h('label', {for: 'token-input'}, 'API token'), input,
  h('div', {class: 'row'}, h('button', {type: 'submit', class: 'primary'}, 'Sign in'), h('span', {class: 'small muted'}, 'Kept for this tab only.'))));
  setToken('');
  input.focus();
});

// --- flows ------------------------------------------------------------------------

function flowsPage(root) {
  title('Flows');
  const list = h('div', {class: 'cards'}, loading('Loading flows'));
  replace(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'Flows'), h('p', {class: 'muted'}, 'Every flow nqd knows, with its runs by status. Counts update live.')),
    list);
  let first = true;
  return every(4000, async () => {
    let flows;
    try {
      flows = await api('_flows');
    } catch (err) {
      if (first) replace(list, failure(err, 'Flows'));
      throw err;
    }
    first = false;
    if (!flows.length) {
      replace(list, h('div', {class: 'empty'},
        h('h2', {}, 'No flows yet'),
        h('p', {}, 'Point ', h('code', {}, 'NQ_FLOWS_DIR'), ' at a directory of flow definitions, or store one with ', h('code', {}, 'PUT /api/_flows/:name'), '. ', h('code', {}, 'make demo'), ' loads the examples.')));
      return;
    }
    const cards = await Promise.all(flows.map(flowCard));
    replace(list, cards);
  });
}

// runsPage reads a flow's runs page, which spells a cancelled run the
// Nuxt Queue UIs' way ('canceled'), in the spelling of the rest of nqd.
async function runsPage(path) {
  const page = await api(path);
  for (const r of page.items || []) if (r.status === 'canceled') r.status = 'cancelled';
  return page;
}

async function flowCard(f) {
  const name = f.id;
  const [last, ...counts] = await Promise.all([
    runsPage(`_flows/${enc(name)}/runs?limit=1`).catch(() => null),
    ...RUN_STATUSES.map(s => api(`_flows/${enc(name)}/runs?status=${s}&limit=1`).then(p => p.total).catch(() => 0)),
  ]);
  const steps = f.diagram?.nodes?.length ?? (Object.keys(f.steps || {}).length + 1);
  const run = last?.items?.[0];
  return h('article', {class: 'card flow-card', 'data-flow': name},
    h('h2', {}, link(flowHref(name), name)),
    h('p', {class: 'muted'}, `${steps} step${steps === 1 ? '' : 's'} · entry `, h('code', {}, f.entry?.step || '—'),
      ` · ${last ? last.total : 0} run${last?.total === 1 ? '' : 's'}`),
    h('ul', {class: 'counts', 'aria-label': 'Runs by status'},
      RUN_STATUSES.map((s, i) => h('li', {class: `count s-${s}${counts[i] ? '' : ' zero'}`, 'data-status': s},
        h('span', {class: 'n'}, String(counts[i])), h('span', {}, s)))),
    h('p', {class: 'last'}, run
      ? ['Last run ', link(runHref(run.id), shortId(run.id)), ' ', badge(run.status), ' ', h('span', {class: 'muted'}, ago(run.startedAt || run.createdAt))]
      : h('span', {class: 'muted'}, 'No runs yet')));
}

// --- a flow -------------------------------------------------------------------------

function flowPage(root, name) {
  title(name);
  const diagramBox = h('div', {class: 'panel-body'}, loading('Loading the diagram'));
  const diagramNote = h('p', {class: 'muted small', 'aria-live': 'polite'});
  const runsBox = h('div', {}, loading('Loading runs'));
  const filter = h('div', {class: 'segmented', role: 'group', 'aria-label': 'Filter runs by status'});
  const pager = h('div', {class: 'pager'});
  const startBox = startForm(name);
  replace(root,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, link('./', 'Flows'), ' / ', h('span', {}, name)),
    h('div', {class: 'page-head row'}, h('h1', {}, name), h('span', {class: 'spacer'}), startBox.toggle),
    startBox.el,
    h('section', {class: 'panel', 'aria-labelledby': 'diagram-h'}, h('header', {}, h('h2', {id: 'diagram-h'}, 'Diagram'), diagramNote), diagramBox),
    h('section', {class: 'panel', 'aria-labelledby': 'runs-h'}, h('header', {}, h('h2', {id: 'runs-h'}, 'Runs'), h('span', {class: 'spacer'}), filter), runsBox, pager));

  const limit = 10;
  let status = '', offset = 0, selected = null, pinned = false, graph = null, watch = null;

  for (const s of ['', ...RUN_STATUSES]) {
    filter.append(h('button', {type: 'button', class: 'seg', 'aria-pressed': String(s === status), 'data-filter': s || 'all',
      onclick: e => {
        status = s; offset = 0;
        for (const b of filter.children) b.setAttribute('aria-pressed', String(b === e.currentTarget));
        refresh();
      }}, s || 'all'));
  }

  api(`_flows/${enc(name)}/diagram`).then(d => {
    graph = diagram(d);
    replace(diagramBox, graph.el);
    if (watch) watch.show();
  }).catch(err => replace(diagramBox, failure(err, `The flow ${name}`)));

  function select(id) {
    if (id === selected) return;
    selected = id;
    watch?.close();
    watch = watchRun(id, state => {
      graph?.show(state.steps);
      replace(diagramNote, 'Showing run ', link(runHref(id), shortId(id)), ' ', badge(state.status), ` · ${doneSteps(state)} of ${Object.keys(state.steps).length || '—'} steps done`);
    });
    for (const b of runsBox.querySelectorAll('button.show')) b.setAttribute('aria-pressed', String(b.dataset.run === id));
  }

  async function refresh() {
    let page;
    try {
      page = await runsPage(`_flows/${enc(name)}/runs?limit=${limit}&offset=${offset}${status ? `&status=${status}` : ''}`);
    } catch (err) {
      replace(runsBox, failure(err, `The flow ${name}`));
      throw err;
    }
    if (!page.items.length) {
      replace(runsBox, h('p', {class: 'empty small'}, status ? `No ${status} runs.` : 'No runs yet. Start one with the button above.'));
    } else {
      replace(runsBox, h('div', {class: 'table-wrap'}, h('table', {class: 'runs'},
        h('thead', {}, h('tr', {}, h('th', {}, 'Run'), h('th', {}, 'Status'), h('th', {}, 'Progress'), h('th', {}, 'Started'), h('th', {}, 'Duration'), h('th', {}, h('span', {class: 'sr'}, 'Diagram')))),
        h('tbody', {}, page.items.map(r => h('tr', {'data-run': r.id, 'data-status': r.status},
          h('td', {}, link(runHref(r.id), h('code', {}, shortId(r.id)))),
          h('td', {}, badge(r.status)),
          h('td', {}, progress(r.completedSteps, r.stepCount)),
          h('td', {title: r.startedAt}, ago(r.startedAt)),
          h('td', {}, duration((r.completedAt ? Date.parse(r.completedAt) : Date.now()) - Date.parse(r.startedAt))),
          h('td', {}, h('button', {type: 'button', class: 'ghost small show', 'data-run': r.id, 'aria-pressed': String(r.id === selected),
            onclick: () => { pinned = true; select(r.id); }}, 'Show'))))))));
    }
    const to = offset + page.items.length;
    replace(pager,
      h('span', {class: 'muted small'}, page.total ? `${offset + 1}–${to} of ${page.total}` : ''),
      h('button', {type: 'button', class: 'ghost small', disabled: offset === 0, onclick: () => { offset = Math.max(0, offset - limit); refresh(); }}, '← Newer'),
      h('button', {type: 'button', class: 'ghost small', disabled: !page.hasMore, onclick: () => { offset += limit; refresh(); }}, 'Older →'));
    if (!pinned && page.items[0] && offset === 0 && !status) select(page.items[0].id);
  }

  const stop = every(2000, refresh);
  return () => { stop(); watch?.close(); };
}

function doneSteps(state) {
  return Object.values(state.steps || {}).filter(s => s.status === 'completed').length;
}

function progress(done, total) {
  const pct = total ? Math.round((done / total) * 100) : 0;
  return h('span', {class: 'progress', title: `${done} of ${total} steps done`},
    h('span', {class: 'bar', role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': String(total || 0), 'aria-valuenow': String(done)},
      h('span', {style: `width:${pct}%`})),
    h('span', {class: 'small'}, `${done}/${total || '—'}`));
}

/** startForm is the "start a run" form: JSON input checked as typed, sent only when valid. */
function startForm(name) {
  const area = h('textarea', {id: 'start-input', rows: 5, spellcheck: false, 'aria-describedby': 'start-msg', placeholder: '{}'});
  const msg = h('p', {id: 'start-msg', class: 'small muted', 'aria-live': 'polite'}, 'The run\'s input: a JSON object. Empty means {}.');
  const submit = h('button', {type: 'submit', class: 'primary'}, 'Start run');
  const check = () => {
    const r = parseInput(area.value);
    area.setAttribute('aria-invalid', String(!r.ok));
    submit.disabled = !r.ok;
    msg.className = r.ok ? 'small muted' : 'small error-text';
    msg.textContent = r.ok ? 'The run\'s input: a JSON object. Empty means {}.' : r.error;
    return r;
  };
  area.addEventListener('input', check);
  const form = h('form', {class: 'panel start', id: 'start-form', hidden: true, onsubmit: async e => {
    e.preventDefault();
    const r = check();
    if (!r.ok) { area.focus(); return; }
    submit.disabled = true;
    msg.textContent = 'Starting…';
    try {
      const res = await api(`_flows/${enc(name)}/start`, {method: 'POST', body: r.value});
      go(runHref(res.flowId || res.runId || res.id));
    } catch (err) {
      msg.className = 'small error-text';
      msg.textContent = err.message;
      submit.disabled = false;
    }
  }},
  h('h2', {}, h('label', {for: 'start-input'}, 'Start a run of ', name)), area, msg,
  h('div', {class: 'row'}, submit, h('button', {type: 'button', class: 'ghost', onclick: () => { form.hidden = true; toggle.setAttribute('aria-expanded', 'false'); toggle.focus(); }}, 'Cancel')));
  const toggle = h('button', {type: 'button', class: 'primary', id: 'start-toggle', 'aria-expanded': 'false', 'aria-controls': 'start-form',
    onclick: () => { form.hidden = !form.hidden; toggle.setAttribute('aria-expanded', String(!form.hidden)); if (!form.hidden) area.focus(); }}, 'Start a run');
  return {el: form, toggle};
}

// --- watching a run -----------------------------------------------------------------

/**
 * watchRun follows a run's stream and calls onState with its reduced state
 * after each burst of events. The browser resumes a dropped stream by itself
 * with Last-Event-ID (the server sets retry:), so reconnection is left to it.
 */
function watchRun(id, onState, onEvent = () => {}, onStatus = () => {}, onMissing = () => {}) {
  let closed = false, shown = null, es = null, lastId = '', retry = 0;
  let asked = 0;
  const load = throttle(150, async () => {
    const mine = ++asked;
    try {
      const res = await api(`_events/flow/${enc(id)}/state`);
      // An answer overtaken by a later request's would show an older state.
      if (!closed && mine === asked) { shown = res.state; onState(res.state, res.lastEventId); }
    } catch (err) {
      // A run with no events (404) is shown once its first event streams in;
      // other trouble shows in the stream's status.
      if (err instanceof ApiError && err.status === 404 && !closed && mine === asked) onMissing();
    }
  });
  const parse = m => { try { return JSON.parse(m.data); } catch { return {}; } };
  // open (re)connects. The browser itself resumes a dropped connection; a
  // closed one (say, an expired stream token) is reopened here after the
  // last event seen.
  async function open() {
    if (closed) return;
    if (token()) {
      // A browser cannot set headers on an EventSource: the stream token
      // travels in a cookie scoped to the stream routes.
      try {
        await api('_auth/stream-token', {method: 'POST', body: {type: 'flow', id, ttl: 3600, cookie: true}});
      } catch {
        onStatus('closed');
        retry = setTimeout(open, 5000);
        return;
      }
    }
    if (closed) return;
    es = new EventSource(`/api/_events/flow/${enc(id)}/stream${lastId ? `?lastEventId=${enc(lastId)}` : ''}`);
    es.onopen = () => onStatus('live');
    es.onerror = () => {
      if (es.readyState !== EventSource.CLOSED) { onStatus('reconnecting'); return; }
      onStatus('closed');
      retry = setTimeout(open, 3000);
    };
    es.onmessage = m => {
      const msg = parse(m);
      if (m.lastEventId) lastId = m.lastEventId;
      if (msg.record) onEvent(msg.record);
      load();
    };
    es.addEventListener('reset', m => {
      const msg = parse(m);
      lastId = msg.position || '';
      onEvent(null, {reset: msg.position});
      load();
    });
    es.addEventListener('truncated', m => onEvent(null, {truncated: parse(m).limit}));
  }
  open();
  load();
  return {
    close() { closed = true; clearTimeout(retry); es?.close(); },
    show() { if (shown) onState(shown); },
  };
}

// --- a run ----------------------------------------------------------------------------

function runPage(root, id) {
  title(`Run ${shortId(id)}`);
  const crumbs = h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, link('./', 'Flows'), ' / … / ', h('span', {}, shortId(id)));
  const statusEl = h('span', {id: 'run-status'}, badge('loading'));
  const live = h('span', {class: 'live', role: 'status', 'aria-live': 'polite'}, 'connecting');
  const actions = h('div', {class: 'row actions'});
  const stats = h('dl', {class: 'stats'});
  const notice = h('div', {'aria-live': 'polite'});
  const diagramBox = h('div', {class: 'panel-body'});
  const stepsBox = h('div', {}, loading('Loading steps'));
  const awaitsBox = h('div', {});
  const timeline = h('ol', {class: 'timeline', id: 'timeline', tabindex: '0', 'aria-label': 'Events, oldest first. Arrow keys move, Enter shows the state at an event.'});
  const timelineCount = h('span', {class: 'muted small'});
  const levelSel = h('select', {id: 'log-level', 'aria-label': 'Lowest log level shown'},
    ['debug', 'info', 'warn', 'error'].map(l => h('option', {value: l, selected: l === 'debug'}, l === 'debug' ? 'all levels' : `${l} and up`)));
  const logsBox = h('div', {});
  const tt = timeTravel(id);

  replace(root,
    crumbs,
    h('div', {class: 'page-head row'}, h('h1', {}, 'Run ', h('code', {title: id}, shortId(id))), statusEl, live, h('span', {class: 'spacer'}), actions),
    stats, notice,
    h('div', {class: 'grid'},
      h('section', {class: 'panel wide', 'aria-labelledby': 'rd-h'}, h('header', {}, h('h2', {id: 'rd-h'}, 'Diagram')), diagramBox),
      h('section', {class: 'panel', id: 'awaits', 'aria-labelledby': 'aw-h'}, h('header', {}, h('h2', {id: 'aw-h'}, 'Pending awaits')), awaitsBox),
      h('section', {class: 'panel', 'aria-labelledby': 'st-h'}, h('header', {}, h('h2', {id: 'st-h'}, 'Steps')), stepsBox),
      h('section', {class: 'panel', 'aria-labelledby': 'tl-h'}, h('header', {}, h('h2', {id: 'tl-h'}, 'Timeline'), h('span', {class: 'spacer'}), timelineCount), timeline),
      h('section', {class: 'panel', 'aria-labelledby': 'lg-h'}, h('header', {}, h('h2', {id: 'lg-h'}, 'Logs'), h('span', {class: 'spacer'}), levelSel), logsBox),
      h('section', {class: 'panel wide', id: 'time-travel', 'aria-labelledby': 'tt-h'}, h('header', {}, h('h2', {id: 'tt-h'}, 'State and time travel')), tt.el)));

  const events = [];
  const seen = new Set();
  let state = null, graph = null, flowName = '', countdowns = [];
  const levels = {debug: 0, info: 1, warn: 2, warning: 2, error: 3};

  levelSel.addEventListener('change', () => state && renderLogs());
  // Arrow keys walk the timeline; Enter shows the state at an event.
  timeline.addEventListener('keydown', e => {
    const cur = document.activeElement?.closest?.('#timeline li');
    let next = null;
    if (e.key === 'ArrowDown') next = cur ? cur.nextElementSibling : timeline.firstElementChild;
    else if (e.key === 'ArrowUp') next = cur ? cur.previousElementSibling : timeline.lastElementChild;
    else if (e.key === 'Enter' && cur) { e.preventDefault(); cur.click(); return; }
    else return;
    e.preventDefault();
    next?.focus();
  });

  function renderLogs() {
    const min = levels[levelSel.value] ?? 0;
    const logs = (state.logs || []).filter(l => (levels[l.level] ?? 1) >= min);
    replace(logsBox, logs.length
      ? h('ul', {class: 'logs'}, logs.map(l => h('li', {class: `log l-${l.level}`, 'data-level': l.level},
        h('span', {class: 'lvl'}, l.level), h('time', {datetime: l.ts}, clock(l.ts)), l.step ? h('code', {}, l.step) : null, h('span', {class: 'msg'}, l.msg))))
      : h('p', {class: 'empty small'}, (state.logs || []).length ? 'No logs at this level.' : 'No logs yet.'));
  }

  function renderSteps() {
    // Started steps in start order, then the rest (awaiting, queued).
    const at = st => (st.startedAt ? Date.parse(st.startedAt) : Infinity);
    const steps = Object.entries(state.steps || {}).sort((a, b) => (at(a[1]) - at(b[1])) || 0);
    // Steps of the flow that have not started yet are pending; ended runs leave them out.
    if (graph && !ENDED.has(state.status)) {
      for (const n of graph.el.querySelectorAll('.node')) {
        const name = n.dataset.step;
        if (!state.steps?.[name]) steps.push([name, {status: 'pending', attempt: 0}]);
      }
    }
    replace(stepsBox, steps.length
      ? h('div', {class: 'table-wrap'}, h('table', {class: 'steps'},
        h('thead', {}, h('tr', {}, h('th', {}, 'Step'), h('th', {}, 'Status'), h('th', {}, 'Attempt'), h('th', {}, 'Duration'))),
        h('tbody', {}, steps.map(([name, s]) => [
          h('tr', {'data-step': name, 'data-status': s.status},
            h('td', {}, h('code', {}, name)), h('td', {}, badge(s.status)),
            h('td', {}, s.maxAttempts ? `${s.attempt} of ${s.maxAttempts}` : s.attempt ? String(s.attempt) : '—'),
            h('td', {}, s.duration ? duration(s.duration) : s.status === 'running' ? duration(Date.now() - Date.parse(s.startedAt)) : '—')),
          s.error ? h('tr', {class: 'err-row'}, h('td', {colspan: 4}, h('span', {class: 'error-text small'}, s.error, s.nextRetryAt ? ` · retry at ${clock(s.nextRetryAt)}` : ''))) : null,
        ]))))
      : h('p', {class: 'empty small'}, 'No step has started yet.'));
  }

  // Await cards persist across state updates, so a payload being typed
  // survives the events that arrive meanwhile.
  const awaitCards = new Map();
  function renderAwaits() {
    const waiting = Object.entries(state.awaits || {}).filter(([, a]) => a.status === 'waiting');
    const done = Object.values(state.awaits || {}).length - waiting.length;
    const keys = new Set(waiting.map(([key]) => key));
    for (const key of awaitCards.keys()) if (!keys.has(key)) awaitCards.delete(key);
    for (const [key, a] of waiting) {
      if (!awaitCards.has(key)) {
        const ticks = [];
        awaitCards.set(key, {el: awaitCard(key, a, ticks), tick: ticks[0]});
      }
    }
    countdowns = [...awaitCards.values()].map(c => c.tick);
    if (!waiting.length) {
      replace(awaitsBox, h('p', {class: 'empty small'}, done ? `No await is pending (${done} resolved or timed out).` : 'This run awaits nothing.'));
      return;
    }
    const cards = [...awaitCards.values()].map(c => c.el);
    if (cards.length !== awaitsBox.children.length || cards.some((el, i) => awaitsBox.children[i] !== el)) replace(awaitsBox, cards);
  }

  function renderHead() {
    replace(statusEl, badge(state.status));
    const name = state.name || flowName;
    if (name && name !== flowName) {
      flowName = name;
      replace(crumbs, link('./', 'Flows'), ' / ', link(flowHref(name), name), ' / ', h('span', {}, shortId(id)));
      title(`Run ${shortId(id)}`, name);
      api(`_flows/${enc(name)}/diagram`).then(d => { graph = diagram(d); replace(diagramBox, graph.el); graph.show(state.steps); renderHead(); renderSteps(); })
        .catch(() => replace(diagramBox, h('p', {class: 'empty small'}, 'This run\'s flow has no stored definition, so there is no diagram.')));
    }
    const steps = Object.values(state.steps || {});
    const total = Math.max(steps.length, graph ? graph.el.querySelectorAll('.node').length : 0);
    const done = doneSteps(state);
    const start = Date.parse(state.startedAt);
    const ended = ENDED.has(state.status);
    replace(stats,
      h('div', {}, h('dt', {}, 'Steps done'), h('dd', {id: 'steps-done'}, progress(done, total))),
      h('div', {}, h('dt', {}, ended ? 'Took' : 'Elapsed'), h('dd', {id: 'elapsed', 'data-start': start || '', 'data-ended': ended ? '1' : ''},
        ended ? duration(state.duration ?? (Date.parse(state.completedAt) - start)) : start ? duration(Date.now() - start) : '—')),
      h('div', {}, h('dt', {}, 'Events'), h('dd', {id: 'event-count'}, String(state.eventCount))),
      h('div', {}, h('dt', {}, 'Started'), h('dd', {}, state.startedAt ? h('time', {datetime: state.startedAt, title: state.startedAt}, `${clock(state.startedAt)}`) : '—')),
      state.error ? h('div', {class: 'full'}, h('dt', {}, 'Error'), h('dd', {class: 'error-text'}, state.error)) : null,
      state.reason ? h('div', {class: 'full'}, h('dt', {}, 'Reason'), h('dd', {}, state.reason)) : null);
    replace(actions,
      !ended && flowName ? h('button', {type: 'button', class: 'ghost danger', onclick: () => act('cancel')}, 'Cancel run') : null,
      ended && flowName ? h('button', {type: 'button', class: 'ghost', onclick: () => act('restart')}, 'Restart') : null);
  }

  async function act(what) {
    try {
      await api(`_flows/${enc(flowName)}/runs/${enc(id)}/${what}`, {method: 'POST'});
    } catch (err) {
      replace(notice, failure(err, `Could not ${what} the run`));
    }
  }

  function onMissing() {
    replace(statusEl, badge('unknown'));
    replace(notice, h('div', {class: 'notice', role: 'alert', id: 'not-found'}, h('strong', {}, 'Run not found.'), ` No events are stored for ${id}. The page shows the run as soon as one arrives.`));
  }

  function onState(s) {
    state = s;
    if (notice.querySelector('#not-found')) replace(notice);
    renderHead();
    renderSteps();
    renderAwaits();
    renderLogs();
    graph?.show(s.steps);
    tt.update(events, s);
  }

  const t0 = () => (events[0] ? Date.parse(events[0].ts) : 0);
  function onEvent(rec, info) {
    if (info?.reset !== undefined) {
      events.length = 0; seen.clear(); timeline.replaceChildren();
      replace(notice, h('div', {class: 'notice'}, 'The stream restarted from the current state; earlier events are not listed.'));
      return;
    }
    if (info?.truncated) {
      replace(notice, h('div', {class: 'notice'}, `Only the newest ${info.truncated} events are listed.`));
      return;
    }
    if (!rec?.id || seen.has(rec.id)) return;
    seen.add(rec.id);
    events.push(rec);
    const kind = rec.kind || rec.type;
    const follow = timeline.scrollTop + timeline.clientHeight >= timeline.scrollHeight - 24;
    const k = events.length;
    timeline.append(h('li', {class: `ev k-${kind.split('.')[0]}`, 'data-kind': kind, 'data-id': rec.id, tabindex: '-1',
      title: 'Show the state at this event', onclick: () => tt.goTo(k)},
      h('span', {class: 'ev-t', title: rec.ts}, `+${duration(Date.parse(rec.ts) - t0())}`),
      h('span', {class: 'ev-kind'}, kind),
      rec.step ? h('code', {class: 'ev-step'}, rec.step) : null,
      rec.attempt > 1 ? h('span', {class: 'muted small'}, `try ${rec.attempt}`) : null,
      eventNote(rec)));
    if (follow) timeline.scrollTop = timeline.scrollHeight;
    replace(timelineCount, `${events.length} events`);
  }

  const watch = watchRun(id, onState, onEvent, s => {
    live.className = `live ${s}`;
    live.textContent = s === 'live' ? 'live' : s === 'closed' ? 'disconnected' : 'reconnecting…';
  }, onMissing);
  const ticker = setInterval(() => {
    const el = document.getElementById('elapsed');
    if (el && el.dataset.start && !el.dataset.ended) el.textContent = duration(Date.now() - Number(el.dataset.start));
    for (const c of countdowns) c();
  }, 1000);
  return () => { watch.close(); clearInterval(ticker); tt.close(); };
}

function eventNote(rec) {
  const d = rec.data || {};
  const text = d.error ? String(d.error) : d.msg || d.message || d.event || d.name || d.key || (d.reason ? String(d.reason) : '');
  return text ? h('span', {class: `ev-note${d.error ? ' error-text' : ''}`}, String(text).slice(0, 120)) : null;
}

/** awaitCard shows one pending await: where to fire it, when it times out, and a form to fire it. */
function awaitCard(key, a, countdowns) {
  const d = a.data || {};
  const triggerId = d.triggerId || d.trigger || d.webhookId || null;
  const url = triggerId ? `${location.origin}/api/_flows/triggers/${enc(triggerId)}` : null;
  const registered = Date.parse(a.registeredAt);
  const deadline = d.resumeAt ? Date.parse(d.resumeAt) : d.timeout && registered ? registered + Number(d.timeout) : 0;
  const clockEl = h('span', {class: 'countdown', 'data-deadline': deadline || ''});
  const tick = () => {
    if (!deadline) { clockEl.textContent = 'no timeout'; return; }
    const left = deadline - Date.now();
    clockEl.textContent = left > 0 ? `${d.resumeAt ? 'resumes' : 'times out'} in ${duration(left)}` : (d.resumeAt ? 'resuming…' : 'timing out…');
    clockEl.classList.toggle('soon', left < 30_000);
  };
  tick();
  countdowns.push(tick);
  let form = null;
  if (triggerId) {
    const area = h('textarea', {rows: 3, spellcheck: false, class: 'payload', 'aria-label': `Payload for ${triggerId}`, placeholder: '{"approved": true}'});
    const msg = h('p', {class: 'small muted fire-msg', role: 'status'}, 'The payload is sent as the request body.');
    const fire = h('button', {type: 'submit', class: 'primary small'}, 'Fire trigger');
    form = h('form', {class: 'fire', 'data-trigger': triggerId, onsubmit: async e => {
      e.preventDefault();
      const r = parsePayload(area.value);
      if (!r.ok) { msg.className = 'small error-text fire-msg'; msg.textContent = r.error; area.focus(); return; }
      fire.disabled = true;
      msg.className = 'small muted fire-msg';
      msg.textContent = 'Firing…';
      try {
        await api(`_flows/triggers/${enc(triggerId)}`, {method: 'POST', body: JSON.stringify(r.value)});
        msg.className = 'small ok-text fire-msg';
        msg.textContent = 'Fired. The run resumes when nqd delivers it.';
      } catch (err) {
        msg.className = 'small error-text fire-msg';
        msg.textContent = triggerError(err);
      } finally {
        fire.disabled = false;
      }
    }}, area, h('div', {class: 'row'}, fire, msg));
  }
  return h('article', {class: 'await', 'data-await': key},
    h('div', {class: 'row'}, h('code', {}, a.step), h('span', {class: 'badge s-waiting'}, d.triggerType || a.type || 'await'), h('span', {class: 'spacer'}), clockEl),
    h('p', {class: 'small muted'}, `Waiting since ${clock(a.registeredAt)}`, d.eventKind ? ` for ${d.eventKind}` : ''),
    url ? h('p', {class: 'url'}, h('code', {class: 'trigger-url'}, `POST ${url}`),
      h('button', {type: 'button', class: 'ghost small', onclick: e => copy(url, e.currentTarget)}, 'Copy')) : null,
    form);
}

function parsePayload(text) {
  if (!text.trim()) return {ok: true, value: {}};
  try { return {ok: true, value: JSON.parse(text)}; } catch (err) { return {ok: false, error: `Not valid JSON: ${err.message}`}; }
}

function triggerError(err) {
  // nqd's router answers a missing route with "No route for …"; a trigger
  // route that exists answers 404 for an id nothing awaits.
  if (err instanceof ApiError && (err.status === 405 || (err.status === 404 && /^No route/.test(err.message)))) {
    return 'Firing triggers is not available on this server: it has no trigger route yet.';
  }
  if (err instanceof ApiError && err.status === 404) return 'No step awaits a trigger with this id.';
  if (err instanceof ApiError && err.status === 410) return 'This trigger has expired or already fired.';
  return err.message;
}

async function copy(text, btn) {
  try {
    await navigator.clipboard.writeText(text);
    btn.textContent = 'Copied';
  } catch {
    btn.textContent = 'Select and copy';
  }
  setTimeout(() => { btn.textContent = 'Copy'; }, 1500);
}

/**
 * timeTravel is the slider over a run's events: at event k it shows the
 * state the server folds up to that event and what that event changed.
 * While the slider sits at the newest event it follows new ones.
 */
function timeTravel(id) {
  const slider = h('input', {type: 'range', id: 'tt-slider', min: 1, max: 1, value: 1, step: 1, disabled: true, 'aria-describedby': 'tt-label'});
  const label = h('p', {id: 'tt-label', class: 'small', 'aria-live': 'polite'}, 'No events yet.');
  const latest = h('button', {type: 'button', class: 'ghost small', disabled: true}, 'Latest');
  const stateView = h('pre', {class: 'json', id: 'tt-state', tabindex: '0', 'aria-label': 'State at the selected event'});
  const diffView = h('div', {class: 'diff', id: 'tt-diff'});
  let events = [], following = true, current = null, ctl = null;

  const show = debounce(60, async k => {
    const ev = events[k - 1];
    if (!ev) return;
    ctl?.abort();
    ctl = new AbortController();
    const signal = ctl.signal;
    const prev = events[k - 2];
    replace(label, h('strong', {}, `Event ${k} of ${events.length}`), ' · ', h('code', {}, ev.kind || ev.type), ev.step ? [' · ', h('code', {}, ev.step)] : null, ` · ${clock(ev.ts)}`);
    try {
      const [st, diff] = await Promise.all([
        api(`_events/flow/${enc(id)}/state?at=${ev.id}`, {signal}),
        api(`_events/flow/${enc(id)}/state/diff?to=${ev.id}${prev ? `&from=${prev.id}` : ''}`, {signal}),
      ]);
      current = ev.id;
      stateView.dataset.at = ev.id;
      stateView.dataset.status = st.state.status || '';
      stateView.textContent = json(trimState(st.state));
      replace(diffView, renderDiff(diff.diff));
    } catch (err) {
      if (err.name !== 'AbortError') replace(diffView, failure(err, 'The state'));
    }
  });

  slider.addEventListener('input', () => {
    following = Number(slider.value) === events.length;
    latest.disabled = following;
    show(Number(slider.value));
  });
  latest.addEventListener('click', () => {
    slider.value = String(events.length);
    following = true;
    latest.disabled = true;
    show(events.length);
  });

  return {
    /** goTo shows the state at event k (1-based) and brings the section into view. */
    goTo(k) {
      slider.value = String(k);
      following = k === events.length;
      latest.disabled = following;
      show(k);
      slider.focus({preventScroll: true});
      slider.closest('section').scrollIntoView({behavior: 'smooth', block: 'start'});
    },
    el: h('div', {class: 'tt'},
      h('div', {class: 'row'}, h('label', {for: 'tt-slider', class: 'small'}, 'Event'), slider, latest),
      label,
      h('div', {class: 'tt-panes'},
        h('div', {}, h('h3', {}, 'State at this event'), stateView),
        h('div', {}, h('h3', {}, 'What this event changed'), diffView))),
    update(all) {
      events = all;
      if (!events.length) return;
      slider.disabled = false;
      slider.max = String(events.length);
      if (following) {
        slider.value = String(events.length);
        if (current !== events[events.length - 1].id) show(events.length);
      }
    },
    close() { ctl?.abort(); },
  };
}

/** trimState leaves out the lists that the timeline and logs already show. */
function trimState(s) {
  const {logs, emits, ...rest} = s;
  return {...rest, logs: `${(logs || []).length} entries`, emits: `${(emits || []).length} entries`};
}

function renderDiff(d) {
  const items = [];
  const short = v => { const s = v === undefined ? '∅' : JSON.stringify(v); return s.length > 80 ? s.slice(0, 79) + '…' : s; };
  for (const [k, c] of Object.entries(d.changed || {})) items.push(h('li', {class: 'chg'}, h('code', {}, k), ': ', h('del', {}, short(c.from)), ' → ', h('ins', {}, short(c.to))));
  for (const [field, kd] of Object.entries(d.keyed || {})) {
    for (const [k, v] of Object.entries(kd.added || {})) items.push(h('li', {class: 'add'}, '+ ', h('code', {}, `${field}.${k}`), ' ', h('ins', {}, short(v))));
    for (const [k, c] of Object.entries(kd.changed || {})) items.push(h('li', {class: 'chg'}, '~ ', h('code', {}, `${field}.${k}`), ' ', h('del', {}, short(c.from)), ' → ', h('ins', {}, short(c.to))));
    for (const k of Object.keys(kd.removed || {})) items.push(h('li', {class: 'del'}, '− ', h('code', {}, `${field}.${k}`)));
  }
  for (const [field, ld] of Object.entries(d.lists || {})) {
    for (const v of ld.added || []) items.push(h('li', {class: 'add'}, '+ ', h('code', {}, field), ' ', h('ins', {}, short(v.msg || v.event || v))));
    if (ld.removed?.length) items.push(h('li', {class: 'del'}, `− ${ld.removed.length} old ${field}`));
  }
  return items.length ? h('ul', {}, items) : h('p', {class: 'empty small'}, 'This event changed nothing in the state.');
}

// --- triggers ---------------------------------------------------------------------------

function triggersPage(root) {
  title('Triggers');
  const list = h('div', {}, loading('Loading triggers'));
  const idInput = h('input', {id: 'fire-id', required: true, pattern: '[A-Za-z0-9][A-Za-z0-9._~\\-]{0,127}', placeholder: 'approval-1234', autocomplete: 'off'});
  const area = h('textarea', {id: 'fire-payload', rows: 3, spellcheck: false, placeholder: '{"approved": true}'});
  const msg = h('p', {class: 'small muted fire-msg', role: 'status'}, 'Fires the trigger a step awaits; the payload is the request body.');
  const form = h('form', {class: 'panel fire', onsubmit: async e => {
    e.preventDefault();
    const r = parsePayload(area.value);
    if (!idInput.checkValidity()) { msg.className = 'small error-text fire-msg'; msg.textContent = 'A trigger id is letters, digits and . _ ~ -'; idInput.focus(); return; }
    if (!r.ok) { msg.className = 'small error-text fire-msg'; msg.textContent = r.error; area.focus(); return; }
    msg.className = 'small muted fire-msg'; msg.textContent = 'Firing…';
    try {
      await api(`_flows/triggers/${enc(idInput.value)}`, {method: 'POST', body: JSON.stringify(r.value)});
      msg.className = 'small ok-text fire-msg'; msg.textContent = 'Fired.';
    } catch (err) {
      msg.className = 'small error-text fire-msg'; msg.textContent = triggerError(err);
    }
  }},
  h('h2', {}, 'Fire a trigger'),
  h('div', {class: 'form-grid'}, h('label', {for: 'fire-id'}, 'Trigger id'), idInput, h('label', {for: 'fire-payload'}, 'Payload (JSON)'), area),
  h('div', {class: 'row'}, h('button', {type: 'submit', class: 'primary'}, 'Fire'), msg));
  const waits = h('div', {}, loading('Loading awaits'));
  const waitsPanel = h('section', {class: 'panel', 'aria-labelledby': 'waits-h'}, h('header', {}, h('h2', {id: 'waits-h'}, 'Waiting now')), waits);
  const [registry, stopRegistry] = registryPanel();
  replace(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'Triggers'), h('p', {class: 'muted'}, 'The trigger registry, what runs wait for, and the triggers of awaits, newest first.')),
    registry,
    waitsPanel,
    h('section', {class: 'panel', 'aria-labelledby': 'trig-h'}, h('header', {}, h('h2', {id: 'trig-h'}, 'Registered triggers')), list), form);
  const fill = id => { idInput.value = id; area.focus(); form.scrollIntoView({behavior: 'smooth', block: 'center'}); };
  const stopWaits = every(3000, async () => {
    let page;
    try {
      page = await api('_flows/waits?limit=100');
    } catch (err) {
      // A server without awaits has no such route: the panel has nothing to say.
      if (err instanceof ApiError && err.status === 404) { waitsPanel.hidden = true; return; }
      replace(waits, failure(err, 'Awaits'));
      throw err;
    }
    waitsPanel.hidden = false;
    replace(waits, !page.items.length
      ? h('p', {class: 'empty small'}, 'No run is waiting.')
      : h('div', {class: 'table-wrap'}, h('table', {class: 'waits'},
        h('thead', {}, h('tr', {}, h('th', {}, 'Run'), h('th', {}, 'Step'), h('th', {}, 'Waits for'), h('th', {}, 'Since'), h('th', {}, 'Until'), h('th', {}, h('span', {class: 'sr'}, 'Fire')))),
        h('tbody', {}, page.items.map(w => h('tr', {'data-await': w.awaitId},
          h('td', {}, link(runHref(w.runId), shortId(w.runId)), ' ', h('span', {class: 'muted small'}, w.flowName)),
          h('td', {}, h('code', {}, w.step)),
          h('td', {}, w.kind === 'trigger' ? `${w.triggerType || 'trigger'}` : w.kind === 'event' ? h('code', {}, w.eventKind) : 'time'),
          h('td', {}, ago(w.registeredAt)),
          h('td', {title: w.resumeAt || w.deadline || ''}, w.resumeAt || w.deadline ? `in ${duration(Date.parse(w.resumeAt || w.deadline) - Date.now())}` : '—'),
          h('td', {}, w.triggerId ? h('button', {type: 'button', class: 'ghost small', 'data-trigger': w.triggerId, onclick: () => fill(w.triggerId)}, 'Fire…') : null)))))));
  });
  const stopList = every(5000, async () => {
    let page;
    try {
      page = await api('_events/trigger/list?limit=50');
    } catch (err) {
      replace(list, failure(err, 'Triggers'));
      throw err;
    }
    if (!page.items.length) {
      replace(list, h('div', {class: 'empty'}, h('h2', {}, 'No triggers yet'),
        h('p', {}, 'A trigger appears here when a step awaits one, or when events are written to a ', h('code', {}, 'trigger'), ' context.')));
      return;
    }
    const states = await Promise.all(page.items.map(t => api(`_events/trigger/${enc(t.id)}/state`).then(r => r.state).catch(() => null)));
    // The registry's triggers share the type; the panel above shows them.
    const awaited = page.items.map((t, i) => [t, states[i] || {}]).filter(([, s]) => !s.spec);
    replace(list, h('div', {class: 'table-wrap'}, h('table', {},
      h('thead', {}, h('tr', {}, h('th', {}, 'Trigger'), h('th', {}, 'Type'), h('th', {}, 'Status'), h('th', {}, 'Fired'), h('th', {}, 'Run'), h('th', {}, 'Registered'))),
      h('tbody', {}, awaited.map(([t, s]) => {
        return h('tr', {'data-trigger': t.id},
          h('td', {}, h('code', {}, t.id)), h('td', {}, s.type || '—'), h('td', {}, badge(s.status)),
          h('td', {}, String(s.fired ?? 0)),
          h('td', {}, s.correlationId ? link(runHref(s.correlationId), shortId(s.correlationId)) : '—'),
          h('td', {}, ago(t.createdAt)));
      })))));
  });
  return () => { stopRegistry(); stopWaits(); stopList(); };
}

function notFoundPage(root) {
  title('Not found');
  replace(root, h('div', {class: 'empty'}, h('h1', {}, 'Nothing here'), h('p', {}, 'This page does not exist. ', link('./', 'See the flows.'))));
}

render(false);

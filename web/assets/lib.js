// Small helpers shared by the pages: building DOM, calling the API,
// formatting times and statuses. No framework: the pages are small enough
// that rebuilding a section on change stays fast and readable.

/** h builds an element: h('a', {href: 'x', class: 'y'}, 'text', child). */
export function h(tag, attrs, ...children) {
  const svg = tag.startsWith('svg:');
  const el = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (!svg && k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

/** replace swaps the children of el for the given ones. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** ApiError is an answer of the API that was not a success. */
export class ApiError extends Error {
  // nqd answers errors as {"error": {code, message, fields}}.
  constructor(status, body) {
    const e = body?.error && typeof body.error === 'object' ? body.error : body;
    super(e?.message || (status ? `HTTP ${status}` : 'The server cannot be reached.'));
    this.status = status;
    this.code = e?.code;
    this.fields = e?.fields;
  }
  get unreachable() { return this.status === 0; }
}

// The API token, when nqd requires one. It lives in sessionStorage: it is
// gone when the tab closes, and other sites cannot read it.
const TOKEN_KEY = 'nqd-token';
/** token is the API token the page sends, or ''. */
export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
/** setToken stores the API token; '' forgets it. */
export function setToken(t) { if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY); }

const authListeners = new Set();
/** onAuthNeeded calls fn when the API refuses the page's credentials. */
export function onAuthNeeded(fn) { authListeners.add(fn); }

/** api calls the nqd API (same origin) and answers its JSON body. */
export async function api(path, {method = 'GET', body, signal} = {}) {
  let res;
  const headers = body === undefined ? {} : {'Content-Type': 'application/json'};
  if (token()) headers.Authorization = `Bearer ${token()}`;
  try {
    res = await fetch('/api/' + path.replace(/^\//, ''), {
      method, signal, headers,
      body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)),
    });
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    serverState(false);
    throw new ApiError(0);
  }
  serverState(true);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON: keep null */ }
  if (res.status === 401) for (const fn of authListeners) fn();
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

let reachable = true;
const reachListeners = new Set();
/** onServerState calls fn(reachable) whenever reachability changes. */
export function onServerState(fn) { reachListeners.add(fn); return () => reachListeners.delete(fn); }
export function serverState(ok) {
  if (ok === reachable) return;
  reachable = ok;
  for (const fn of reachListeners) fn(ok);
}

export const enc = encodeURIComponent;

/** shortId keeps the start and end of a long id. */
export function shortId(id) {
  return id && id.length > 16 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

/** duration formats milliseconds for people: 850 ms, 4.2 s, 3 m 05 s. */
export function duration(ms) {
  if (ms === undefined || ms === null || Number.isNaN(ms)) return '—';
  if (ms < 0) ms = 0;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
  const s = Math.floor(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} m ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor(s / 60) % 60).padStart(2, '0')} m`;
}

/** ago formats a time as "12 s ago", "3 h ago", or a date when older. */
export function ago(t) {
  const ms = typeof t === 'number' ? t : Date.parse(t);
  if (!ms) return '—';
  const d = Date.now() - ms;
  if (d < 5_000) return 'just now';
  if (d < 86_400_000) return `${duration(d).replace(/ \d+ s$/, '').replace(/ \d+ m$/, '')} ago`;
  return new Date(ms).toLocaleDateString();
}

/** clock formats a time of day with milliseconds. */
export function clock(t) {
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return '';
  return d.toLocaleTimeString([], {hour12: false}) + '.' + String(d.getMilliseconds()).padStart(3, '0');
}

/** badge shows a status with its colour; the text carries it for screen readers. */
export function badge(status) {
  return h('span', {class: `badge s-${status || 'unknown'}`}, status || 'unknown');
}

/** json pretty-prints a value. */
export function json(v) {
  return JSON.stringify(v, null, 2);
}

/** parseInput checks a run's input: empty means {}, otherwise a JSON object. */
export function parseInput(text) {
  if (!text.trim()) return {ok: true, value: {}};
  try {
    const v = JSON.parse(text);
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return {ok: false, error: 'The input must be a JSON object, like {"key": "value"}.'};
    return {ok: true, value: v};
  } catch (err) {
    return {ok: false, error: `Not valid JSON: ${err.message}`};
  }
}

/** loading is the placeholder a section shows while it waits for the API. */
export function loading(what = 'Loading') {
  return h('p', {class: 'muted loading', role: 'status'}, `${what}…`);
}

/** failure is the message a section shows when the API failed. */
export function failure(err, what) {
  if (err instanceof ApiError && err.unreachable) {
    return h('div', {class: 'notice error', role: 'alert'},
      h('strong', {}, 'The server cannot be reached.'), ' ', 'nqd may be restarting; the page retries on its own.');
  }
  if (err instanceof ApiError && err.status === 404) {
    return h('div', {class: 'notice', role: 'alert'}, h('strong', {}, `${what || 'This'} was not found.`), ' ', err.message);
  }
  return h('div', {class: 'notice error', role: 'alert'}, h('strong', {}, `${what ? what + ': ' : ''}${err.message}`));
}

/** every runs fn now and then every ms while the page is visible; stop with the returned function. */
export function every(ms, fn) {
  let timer = 0;
  let stopped = false;
  const tick = async () => {
    if (stopped) return;
    if (!document.hidden) { try { await fn(); } catch { /* the section shows its own error */ } }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

/** debounce runs fn at most once per ms, with the latest arguments. */
export function debounce(ms, fn) {
  let timer = 0;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

/**
 * throttle runs fn at once, then at most once per ms while calls keep
 * coming, and once more after the last: unlike debounce, a steady stream of
 * calls cannot starve it.
 */
export function throttle(ms, fn) {
  let timer = 0, last = 0;
  const run = () => { timer = 0; last = Date.now(); fn(); };
  return () => {
    if (timer) return; // the scheduled run will see the latest
    const wait = last + ms - Date.now();
    if (wait <= 0) run(); else timer = setTimeout(run, wait);
  };
}

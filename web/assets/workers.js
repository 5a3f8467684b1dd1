// The workers page: every worker process the registry knows, connected or
// gone within the registry's retention, with its SDK, host, queues,
// concurrency and jobs in flight. It follows the registry's event stream
// (registry:workers), so an arrival, a heartbeat or a departure shows at
// once, and reloads every 10 s besides so that "last seen" stays true.
import {h, replace, api, enc, token, ago, badge, loading, failure, every, throttle} from './lib.js';

const setTitle = (...parts) => { document.title = [...parts, 'nqd'].join(' · '); };

/** follow calls onChange on every event of the registry stream until stopped. */
function follow(onChange, onStatus) {
  let closed = false, es = null, retry = 0;
  async function open() {
    if (closed) return;
    if (token()) {
      // A browser cannot set headers on an EventSource: the stream token
      // travels in a cookie scoped to the stream routes.
      try {
        await api('_auth/stream-token', {method: 'POST', body: {type: 'registry', id: 'workers', ttl: 3600, cookie: true}});
      } catch {
        onStatus('closed');
        retry = setTimeout(open, 5000);
        return;
      }
    }
    if (closed) return;
    // The list is read from /api/_workers; the stream only says when to.
    es = new EventSource('/api/_events/registry/workers/stream?backfill=1');
    es.onopen = () => onStatus('live');
    es.onerror = () => {
      if (es.readyState !== EventSource.CLOSED) { onStatus('reconnecting'); return; }
      onStatus('closed');
      retry = setTimeout(open, 3000);
    };
    es.onmessage = onChange;
    es.addEventListener('reset', onChange);
  }
  open();
  return () => { closed = true; clearTimeout(retry); es?.close(); };
}

function sdkOf(w) {
  if (!w.sdk && !w.version) return h('span', {class: 'muted'}, '—');
  return [w.sdk || '?', w.version ? h('span', {class: 'muted'}, ` ${w.version}`) : ''];
}

export function workersPage(root) {
  setTitle('Workers');
  const box = h('div', {}, loading('Loading workers'));
  const unserved = h('div', {});
  const status = h('span', {class: 'live', role: 'status', 'aria-live': 'polite'});
  const filter = h('div', {class: 'segmented', role: 'group', 'aria-label': 'Which workers'});
  let show = 'active';
  replace(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'Workers'),
      h('p', {class: 'muted'}, 'The worker processes that serve the queues: over the worker channel or over HTTP, with the SDK, host, queues, concurrency and jobs in flight each reports. A worker not heard from for a minute is lost.')),
    unserved,
    h('section', {class: 'panel', 'aria-labelledby': 'workers-h'},
      h('header', {}, h('h2', {id: 'workers-h'}, 'Workers'), status, h('span', {class: 'spacer'}), filter), box));

  async function refresh() {
    let list, queues;
    try {
      [list, queues] = await Promise.all([api('_workers'), api('_queues/metrics').catch(() => ({}))]);
    } catch (err) {
      replace(box, failure(err, 'Workers'));
      throw err;
    }
    const waiting = Object.keys(queues).filter(q => queues[q].unserved).sort();
    replace(unserved, waiting.length
      ? h('div', {class: 'notice', role: 'alert', 'data-unserved': waiting.join(' ')},
        h('strong', {}, waiting.length === 1 ? 'A queue has jobs waiting and no worker: ' : 'Queues with jobs waiting and no worker: '),
        waiting.map((q, i) => [i ? ', ' : '', h('a', {href: `queues/${enc(q)}`}, h('code', {}, q))]))
      : '');
    const counts = {active: list.active, all: list.count};
    replace(filter, ['active', 'all'].map(s => h('button', {type: 'button', class: 'seg', 'data-filter': s, 'aria-pressed': String(s === show),
      onclick: () => { show = s; refresh(); }},
    s === 'active' ? 'connected' : 'all', ' ', h('span', {class: 'n'}, String(counts[s])))));
    const rows = list.workers.filter(w => show === 'all' || w.status === 'active');
    if (!rows.length) {
      replace(box, h('div', {class: 'empty'}, h('h2', {}, show === 'active' ? 'No worker is connected' : 'No workers yet'),
        h('p', {}, 'A worker appears here when it connects: start one with an nqd SDK (the Go worker package, nqd-worker for TypeScript, nqd-worker-py for Python).')));
      return;
    }
    replace(box, h('div', {class: 'table-wrap'}, h('table', {class: 'workers'},
      h('thead', {}, h('tr', {}, h('th', {}, 'Worker'), h('th', {}, 'SDK'), h('th', {}, 'Host'), h('th', {}, 'Queues'),
        h('th', {}, 'Concurrency'), h('th', {}, 'In flight'), h('th', {}, 'Transport'), h('th', {}, 'Since'), h('th', {}, 'Last seen'), h('th', {}, 'Status'))),
      h('tbody', {}, rows.map(w => h('tr', {'data-worker': w.id, 'data-status': w.status, 'data-sdk': w.sdk},
        h('td', {}, w.name || h('code', {}, w.id), w.name ? h('div', {class: 'small muted'}, h('code', {}, w.id)) : ''),
        h('td', {}, sdkOf(w)),
        h('td', {}, w.host || '—'),
        h('td', {}, w.queues.map((q, i) => [i ? ' ' : '', h('a', {href: `queues/${enc(q)}`}, h('code', {}, q))])),
        h('td', {'data-count': 'concurrency'}, w.concurrency ? String(w.concurrency) : '—'),
        h('td', {'data-count': 'inFlight'}, w.status === 'active' ? String(w.inFlight) : '—'),
        h('td', {}, w.transport),
        h('td', {}, h('time', {datetime: w.firstSeen, title: w.firstSeen}, ago(w.firstSeen))),
        h('td', {}, h('time', {datetime: w.lastSeen, title: w.lastSeen}, ago(w.lastSeen))),
        h('td', {}, badge(w.status), w.reason && w.status !== 'lost' ? h('div', {class: 'small muted'}, w.reason) : '')))))));
  }
  const reload = throttle(250, () => { refresh().catch(() => {}); });
  const stopPoll = every(10_000, refresh);
  const stopFollow = follow(reload, s => { status.className = `live ${s}`; replace(status, s === 'live' ? 'live' : s); });
  return () => { stopPoll(); stopFollow(); };
}

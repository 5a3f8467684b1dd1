// The trigger registry on the Triggers page: every registered trigger with
// its stats, and one trigger's page with its events, newest first, from its
// own stream (GET /api/_triggers/:name/events). Both poll.
import {h, replace, api, enc, ago, badge, loading, failure, every} from './lib.js';

const setTitle = (...parts) => { document.title = [...parts, 'nqd'].join(' · '); };
const link = (path, ...children) => h('a', {href: path}, ...children);
const triggerHref = name => `triggers/${enc(name)}`;

/** registryPanel is the panel of registered triggers; it returns the panel and its stop function. */
export function registryPanel() {
  const box = h('div', {}, loading('Loading the trigger registry'));
  const panel = h('section', {class: 'panel', 'aria-labelledby': 'registry-h'},
    h('header', {}, h('h2', {id: 'registry-h'}, 'Trigger registry')), box);
  const stop = every(3000, async () => {
    let list;
    try {
      list = await api('_triggers');
    } catch (err) {
      replace(box, failure(err, 'The trigger registry'));
      throw err;
    }
    if (!list.length) {
      replace(box, h('p', {class: 'empty small'}, 'No trigger is registered. Register one with ', h('code', {}, 'POST /api/_triggers'), '.'));
      return;
    }
    replace(box, h('div', {class: 'table-wrap'}, h('table', {class: 'registry'},
      h('thead', {}, h('tr', {}, h('th', {}, 'Trigger'), h('th', {}, 'Type'), h('th', {}, 'Status'), h('th', {}, 'Flows'),
        h('th', {}, 'Fires'), h('th', {}, 'Runs started'), h('th', {}, 'Failed'), h('th', {}, 'Last fired'))),
      h('tbody', {}, list.map(t => h('tr', {'data-registry': t.name},
        h('td', {}, link(triggerHref(t.name), t.displayName || t.name)),
        h('td', {}, t.type, t.scope === 'run' ? h('span', {class: 'muted small'}, ' (run)') : null),
        h('td', {}, badge(t.status)),
        h('td', {}, t.subscribedFlows.length ? t.subscribedFlows.join(', ') : '—'),
        h('td', {'data-count': 'fires'}, String(t.stats.totalFires)),
        h('td', {'data-count': 'started'}, String(t.stats.totalFlowsStarted)),
        h('td', {'data-count': 'failed'}, String(t.stats.failureCount)),
        h('td', {}, t.stats.lastFiredAt ? ago(t.stats.lastFiredAt) : 'never')))))));
  });
  return [panel, stop];
}

/** triggerPage shows one registered trigger: its settings, stats and events. */
export function triggerPage(root, name) {
  setTitle(name, 'Triggers');
  const head = h('div', {class: 'page-head'}, h('h1', {}, name), h('p', {class: 'muted'}, link('triggers', 'All triggers')));
  const about = h('div', {}, loading('Loading the trigger'));
  const events = h('div', {}, loading('Loading its events'));
  replace(root, head,
    h('section', {class: 'panel', 'aria-labelledby': 'about-h'}, h('header', {}, h('h2', {id: 'about-h'}, 'Trigger')), about),
    h('section', {class: 'panel', 'aria-labelledby': 'events-h'}, h('header', {}, h('h2', {id: 'events-h'}, 'Events, newest first')), events));
  return every(3000, async () => {
    let t, page;
    try {
      [t, page] = await Promise.all([api(`_triggers/${enc(name)}`), api(`_triggers/${enc(name)}/events?limit=50`)]);
    } catch (err) {
      replace(about, failure(err, `The trigger ${name}`));
      replace(events);
      throw err;
    }
    const s = t.stats;
    replace(about, h('dl', {class: 'facts'},
      h('dt', {}, 'Type'), h('dd', {}, `${t.type}, ${t.scope} scope`),
      h('dt', {}, 'Status'), h('dd', {}, badge(t.status)),
      t.description ? [h('dt', {}, 'Description'), h('dd', {}, t.description)] : null,
      t.webhook ? [h('dt', {}, 'Webhook'), h('dd', {}, h('code', {}, `${t.webhook.method} ${t.webhook.fullUrl}`),
        t.webhook.auth ? h('span', {class: 'muted small'}, ` (secret in ${t.webhook.auth.header})`) : null)] : null,
      t.schedule ? [h('dt', {}, 'Schedule'), h('dd', {}, h('code', {}, t.schedule.cron || `every ${t.schedule.interval} s`), ` ${t.schedule.timezone}`)] : null,
      h('dt', {}, 'Flows'), h('dd', {}, t.subscriptions.length
        ? t.subscriptions.map((x, i) => [i ? ', ' : '', link(`flows/${enc(x.flowName)}`, x.flowName), x.mode === 'manual' ? ' (manual)' : ''])
        : 'none subscribed'),
      h('dt', {}, 'Fires'), h('dd', {'data-count': 'fires'}, `${s.totalFires} (${s.last24h} in the last 24 h)`),
      h('dt', {}, 'Runs started'), h('dd', {'data-count': 'started'}, `${s.totalFlowsStarted}, ${s.failureCount} failed to start (${s.successRate}% started)`),
      h('dt', {}, 'Registered'), h('dd', {}, ago(t.registeredAt))));
    replace(events, !page.events.length ? h('p', {class: 'empty small'}, 'No events.') :
      h('div', {class: 'table-wrap'}, h('table', {class: 'trigger-events'},
        h('thead', {}, h('tr', {}, h('th', {}, 'When'), h('th', {}, 'Event'), h('th', {}, 'Details'))),
        h('tbody', {}, page.events.map(e => h('tr', {'data-event': e.type},
          h('td', {title: new Date(e.ts).toISOString()}, ago(e.ts)),
          h('td', {}, h('code', {}, e.type)),
          h('td', {}, details(e))))))),
      page.hasMore ? h('p', {class: 'muted small'}, `The newest ${page.count} of ${page.total}.`) : null);
  });
}

/** details is what a trigger event says, in a line. */
function details(e) {
  const d = e.data || {};
  switch (e.type) {
    case 'trigger.flow.started': return [link(`flows/${enc(d.flowName)}`, d.flowName), ' ', link(`runs/${enc(d.runId)}`, d.runId)];
    case 'trigger.flow.failed': return [d.flowName, ': ', h('span', {class: 'error-text'}, d.error)];
    case 'subscription.added': case 'subscription.removed': return d.flowName;
    case 'trigger.fired': return h('code', {class: 'small'}, JSON.stringify(d.payload ?? {}).slice(0, 200));
    default: return d.status ? `status ${d.status}` : '';
  }
}

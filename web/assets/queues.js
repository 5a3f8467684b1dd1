// The queue pages: every queue with its jobs by state, its workers (flagged
// when jobs wait and none is connected), pause and resume, and one queue's
// jobs page by page. They poll every 2 s, as the Nuxt Queue UI
// does; nqd keeps no finished jobs, so completed and failed are counted from
// the run index.
import {h, replace, api, enc, shortId, ago, badge, loading, failure, every} from './lib.js';

const STATES = ['waiting', 'active', 'delayed', 'paused', 'completed', 'failed'];
const link = (path, ...children) => h('a', {href: path}, ...children);
const queueHref = name => `queues/${enc(name)}`;
const setTitle = (...parts) => { document.title = [...parts, 'nqd'].join(' · '); };

/** noWorker flags a queue whose jobs wait with no worker connected to take them. */
const noWorker = () => h('span', {class: 'badge s-unserved', 'data-unserved': '', title: 'Jobs wait and no connected worker serves this queue'}, 'no worker');

/**
 * refill replaces box's children and gives the focus back to the control
 * that had it (matched by data-focus), so polling never pulls the focus
 * from under a keyboard user.
 */
function refill(box, ...children) {
  const key = document.activeElement?.closest?.('[data-focus]')?.dataset.focus;
  const had = key && box.contains(document.activeElement);
  replace(box, ...children);
  if (had) box.querySelector(`[data-focus="${CSS.escape(key)}"]`)?.focus();
}

/** toggle is the Pause or Resume button of a queue. */
function toggle(name, paused, note, after) {
  const action = paused ? 'resume' : 'pause';
  return h('button', {type: 'button', class: paused ? 'primary small' : 'ghost small', 'data-action': action, 'data-focus': `toggle:${name}`,
    'aria-label': `${paused ? 'Resume' : 'Pause'} the queue ${name}`,
    onclick: async e => {
      e.currentTarget.disabled = true;
      replace(note);
      try {
        await api(`_queues/${enc(name)}/${action}`, {method: 'POST'});
        replace(note, paused ? `Resumed ${name}: workers take its jobs again.` : `Paused ${name}: its jobs wait until it is resumed.`);
      } catch (err) {
        replace(note, failure(err, `The queue ${name}`));
      }
      await after();
    }}, paused ? 'Resume' : 'Pause');
}

export function queuesPage(root) {
  setTitle('Queues');
  const box = h('div', {}, loading('Loading queues'));
  const note = h('div', {class: 'small muted', role: 'status', 'aria-live': 'polite'});
  replace(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'Queues'),
      h('p', {class: 'muted'}, 'The queues workers claim jobs from, with their jobs by state. A paused queue hands out no job, on every nqd instance, until it is resumed.')),
    h('section', {class: 'panel', 'aria-labelledby': 'queues-h'}, h('header', {}, h('h2', {id: 'queues-h'}, 'All queues')), box, note));

  async function refresh() {
    let metrics;
    try {
      metrics = await api('_queues/metrics');
    } catch (err) {
      replace(box, failure(err, 'Queues'));
      throw err;
    }
    const names = Object.keys(metrics).sort();
    if (!names.length) {
      refill(box, h('div', {class: 'empty'}, h('h2', {}, 'No queues yet'),
        h('p', {}, 'A queue appears when a stored flow names it in a step.')));
      return;
    }
    refill(box, h('div', {class: 'table-wrap'}, h('table', {class: 'queues'},
      h('thead', {}, h('tr', {}, h('th', {}, 'Queue'), STATES.map(s => h('th', {}, s)), h('th', {}, 'Workers'), h('th', {}, 'State'), h('th', {}, h('span', {class: 'sr'}, 'Pause or resume')))),
      h('tbody', {}, names.map(n => {
        const {counts, paused, workers, unserved} = metrics[n];
        return h('tr', {'data-queue': n, 'data-paused': String(paused)},
          h('td', {}, link(queueHref(n), h('code', {}, n))),
          STATES.map(s => h('td', {'data-count': s}, String(counts[s] ?? 0))),
          h('td', {'data-count': 'workers'}, link('workers', String(workers ?? 0))),
          h('td', {}, badge(paused ? 'paused' : 'running'), unserved ? [' ', noWorker()] : ''),
          h('td', {}, toggle(n, paused, note, refresh)));
      })))));
  }
  return every(2000, refresh);
}

export function queuePage(root, name) {
  setTitle(name, 'Queues');
  const head = h('div', {class: 'row'});
  const note = h('div', {class: 'small muted', role: 'status', 'aria-live': 'polite'});
  const filter = h('div', {class: 'segmented', role: 'group', 'aria-label': 'Filter jobs by state'});
  const jobsBox = h('div', {}, loading('Loading jobs'));
  const pager = h('div', {class: 'pager'});
  replace(root,
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, link('queues', 'Queues'), ' / ', h('span', {}, name)),
    h('div', {class: 'page-head row'}, h('h1', {}, name), h('span', {class: 'spacer'}), head),
    note,
    h('section', {class: 'panel', 'aria-labelledby': 'jobs-h'},
      h('header', {}, h('h2', {id: 'jobs-h'}, 'Jobs'), h('span', {class: 'spacer'}), filter), jobsBox, pager),
    h('p', {class: 'small muted'}, 'A job is one step of one run. Finished jobs are read from their runs: paging over completed and failed jobs counts runs.'));

  const limit = 20;
  let state = '', offset = 0;

  async function refresh() {
    let q, page;
    try {
      [q, page] = await Promise.all([
        api(`_queues/${enc(name)}/metrics`),
        api(`_queues/${enc(name)}/job?limit=${limit}&offset=${offset}${state ? `&state=${state}` : ''}`),
      ]);
    } catch (err) {
      replace(jobsBox, failure(err, `The queue ${name}`));
      throw err;
    }
    refill(head, q.unserved ? noWorker() : '', h('span', {class: 'small muted', 'data-count': 'workers'}, `${q.workers ?? 0} ${q.workers === 1 ? 'worker' : 'workers'}`),
      badge(q.paused ? 'paused' : 'running'), toggle(name, q.paused, note, refresh));
    const total = STATES.reduce((n, s) => n + (q.counts[s] || 0), 0);
    refill(filter, ['', ...STATES].map(s => h('button', {type: 'button', class: 'seg', 'data-filter': s || 'all', 'data-focus': `filter:${s}`,
      'aria-pressed': String(s === state),
      onclick: () => { state = s; offset = 0; refresh(); }},
    s || 'all', ' ', h('span', {class: 'n', 'data-count': s || 'all'}, String(s ? q.counts[s] || 0 : total)))));
    if (!page.jobs.length) {
      refill(jobsBox, h('p', {class: 'empty small'}, state ? `No ${state} jobs.` : 'No jobs.'));
    } else {
      refill(jobsBox, h('div', {class: 'table-wrap'}, h('table', {class: 'jobs'},
        h('thead', {}, h('tr', {}, h('th', {}, 'Run'), h('th', {}, 'Step'), h('th', {}, 'Flow'), h('th', {}, 'State'), h('th', {}, 'Attempts'), h('th', {}, 'Queued'), h('th', {}, 'Finished'))),
        h('tbody', {}, page.jobs.map(j => h('tr', {'data-job': j.id, 'data-state': j.state},
          h('td', {}, link(`runs/${enc(j.runId)}`, h('code', {}, shortId(j.runId)))),
          h('td', {}, h('code', {}, j.step)),
          h('td', {}, j.flowName),
          h('td', {}, badge(j.state)),
          h('td', {}, String(j.attemptsMade)),
          h('td', {}, j.timestamp ? ago(j.timestamp) : '—'),
          h('td', {}, j.finishedOn ? ago(j.finishedOn) : '—')))))));
    }
    refill(pager,
      h('span', {class: 'muted small'}, !page.total ? '' : state === 'completed' || state === 'failed' ? `${page.total} ${state} runs` : `${page.total} in all`),
      h('button', {type: 'button', class: 'ghost small', 'data-focus': 'prev', disabled: offset === 0, onclick: () => { offset = Math.max(0, offset - limit); refresh(); }}, '← Previous'),
      h('button', {type: 'button', class: 'ghost small', 'data-focus': 'next', disabled: offset + limit >= page.total, onclick: () => { offset += limit; refresh(); }}, 'Next →'));
  }
  return every(2000, refresh);
}

// The schedules page: every schedule (schedule triggers and the flow
// schedules of Nuxt Queue v0.4) with when it fires next, what it fired, and
// a button that fires it now. It polls every 2 s.
import {h, replace, api, enc, ago, badge, loading, failure, every} from './lib.js';

const setTitle = (...parts) => { document.title = [...parts, 'nqd'].join(' · '); };

/** when describes a schedule's timing: its cron and zone, or its interval. */
function when(spec) {
  if (spec.cron) return `${spec.cron} (${spec.timezone || 'UTC'})`;
  return `every ${spec.interval} s`;
}

/** at formats a fire time in the viewer's zone, with how far off it is. */
function at(iso) {
  const d = new Date(iso);
  const s = Math.round((d.getTime() - Date.now()) / 1000);
  const off = s <= 0 ? 'now' : s < 120 ? `in ${s} s` : s < 7200 ? `in ${Math.round(s / 60)} min` : `in ${Math.round(s / 3600)} h`;
  return h('time', {datetime: iso, title: iso}, `${d.toLocaleString([], {hour12: false})} (${off})`);
}

function fireButton(s, note, after) {
  return h('button', {type: 'button', class: 'ghost small', 'data-action': 'fire', 'data-focus': `fire:${s.id}`,
    'aria-label': `Fire ${s.name} now`,
    onclick: async e => {
      e.currentTarget.disabled = true;
      replace(note);
      try {
        await api(`_scheduler/jobs/${enc(s.id)}/fire`, {method: 'POST'});
        replace(note, `Fired ${s.name}.`);
      } catch (err) {
        replace(note, failure(err, `The schedule ${s.name}`));
      }
      await after();
    }}, 'Fire now');
}

export function schedulesPage(root) {
  setTitle('Schedules');
  const box = h('div', {}, loading('Loading schedules'));
  const note = h('div', {class: 'small muted', role: 'status', 'aria-live': 'polite'});
  replace(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'Schedules'),
      h('p', {class: 'muted'}, 'Schedules start flows on a cron expression or an interval. Each due time fires once, whichever nqd instance is up.')),
    h('section', {class: 'panel', 'aria-labelledby': 'schedules-h'}, h('header', {}, h('h2', {id: 'schedules-h'}, 'All schedules')), box, note));

  async function refresh() {
    let list;
    try {
      list = (await api('_scheduler/schedules')).schedules;
    } catch (err) {
      replace(box, failure(err, 'Schedules'));
      throw err;
    }
    if (!list.length) {
      replace(box, h('div', {class: 'empty'}, h('h2', {}, 'No schedules yet'),
        h('p', {}, 'Register a trigger of type schedule, or POST a cron to /api/_flows/{name}/schedule.')));
      return;
    }
    replace(box, h('div', {class: 'table-wrap'}, h('table', {class: 'schedules'},
      h('thead', {}, h('tr', {}, h('th', {}, 'Schedule'), h('th', {}, 'When'), h('th', {}, 'Starts'), h('th', {}, 'Next fire times'),
        h('th', {}, 'Last fired'), h('th', {}, 'Fires'), h('th', {}, 'Failed'), h('th', {}, 'State'), h('th', {}, h('span', {class: 'sr'}, 'Fire now')))),
      h('tbody', {}, list.map(s => h('tr', {'data-schedule': s.id},
        h('td', {}, h('code', {}, s.name), h('div', {class: 'small muted'}, s.kind === 'trigger' ? 'trigger' : 'flow schedule')),
        h('td', {}, h('code', {}, when(s.spec))),
        h('td', {}, s.kind === 'trigger' ? h('span', {class: 'muted'}, 'its subscribed flows') : s.flows.join(', ')),
        h('td', {'data-next': ''}, s.nextRuns.length ? h('ol', {class: 'plain'}, s.nextRuns.map(t => h('li', {}, at(t)))) : '—'),
        h('td', {}, s.lastRun ? ago(s.lastRun) : '—'),
        h('td', {'data-count': 'fires'}, String(s.runCount)),
        h('td', {'data-count': 'failed'}, String(s.failCount)),
        h('td', {}, badge(s.paused ? 'paused' : 'running')),
        h('td', {}, fireButton(s, note, refresh))))))));
  }
  return every(2000, refresh);
}

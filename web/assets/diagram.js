// The flow diagram: the nodes and edges of GET /api/_flows/:name/diagram,
// laid out left to right in layers (a step one layer right of the latest
// step it subscribes to), drawn as SVG that scales to its container.
import {h} from './lib.js';

const W = 156, H = 52, GAP_X = 84, GAP_Y = 30, PAD = 28, LOOP = 26;

/** layers gives each node the length of the longest emit path from a root to it. */
function layers(diagram) {
  const ids = diagram.nodes.map(n => n.id);
  const layer = new Map(ids.map(id => [id, 0]));
  const edges = diagram.edges.filter(e => e.type === 'emit' && e.from !== e.to);
  // Bellman-Ford style relaxation, bounded so that a cycle cannot loop forever.
  for (let i = 0; i < ids.length; i++) {
    let changed = false;
    for (const e of edges) {
      const want = layer.get(e.from) + 1;
      if (layer.has(e.to) && want > layer.get(e.to) && want < ids.length) { layer.set(e.to, want); changed = true; }
    }
    if (!changed) break;
  }
  const entry = diagram.nodes.find(n => n.entry);
  if (entry) layer.set(entry.id, 0);
  return layer;
}

/** diagram draws a flow and answers {el, show(steps)}: show colours nodes by step status. */
export function diagram(d) {
  const layer = layers(d);
  const cols = [];
  for (const n of d.nodes) (cols[layer.get(n.id)] ||= []).push(n);
  const rows = Math.max(1, ...cols.map(c => (c ? c.length : 0)));
  const hasLoop = d.edges.some(e => e.type === 'await');
  const top = PAD + (hasLoop ? LOOP + 14 : 0);
  const width = PAD * 2 + cols.length * W + Math.max(0, cols.length - 1) * GAP_X;
  const height = top + PAD + rows * H + (rows - 1) * GAP_Y;
  const pos = new Map();
  cols.forEach((col, i) => {
    if (!col) return;
    const offset = ((rows - col.length) * (H + GAP_Y)) / 2;
    col.forEach((n, j) => pos.set(n.id, {x: PAD + i * (W + GAP_X), y: top + offset + j * (H + GAP_Y)}));
  });

  const svg = h('svg:svg', {
    class: 'diagram', viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': `Diagram of ${d.nodes.length} steps`, preserveAspectRatio: 'xMidYMin meet',
    style: `max-width:${width}px`,
  });
  svg.append(h('svg:defs', {},
    h('svg:marker', {id: 'arrow', viewBox: '0 0 10 10', refX: '9', refY: '5', markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse'},
      h('svg:path', {d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead'}))));

  for (const e of d.edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    let path, lx, ly;
    if (e.type === 'await' || e.from === e.to) {
      const x = a.x + W / 2, y = a.y;
      path = `M${x - 26},${y} C${x - 40},${y - LOOP - 18} ${x + 40},${y - LOOP - 18} ${x + 26},${y}`;
      lx = x; ly = y - LOOP - 10;
    } else if (b.x > a.x) {
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
      path = `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 2},${y2}`;
      lx = mx; ly = (y1 + y2) / 2 - 6;
    } else {
      // A back edge (a cycle) goes around below.
      const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y + H, low = Math.max(y1, y2) + GAP_Y;
      path = `M${x1},${y1} C${x1},${low} ${x2},${low} ${x2},${y2 + 2}`;
      lx = (x1 + x2) / 2; ly = low - 4;
    }
    svg.append(h('svg:g', {class: `edge e-${e.type}`},
      h('svg:path', {d: path, 'marker-end': 'url(#arrow)'}),
      h('svg:text', {x: lx, y: ly, 'text-anchor': 'middle', class: 'edge-label'}, e.label + (e.timeout ? ` · ${Math.round(e.timeout / 1000)} s` : ''))));
  }

  const nodes = new Map();
  for (const n of d.nodes) {
    const p = pos.get(n.id);
    const status = h('svg:text', {x: p.x + 14, y: p.y + 38, class: 'node-sub'}, n.entry ? `entry · ${n.queue}` : n.queue);
    const g = h('svg:g', {class: `node n-none${n.type === 'await-step' ? ' await' : ''}`, 'data-step': n.id, tabindex: '0', role: 'listitem', 'aria-label': `${n.id}: not run`},
      h('svg:title', {}, `${n.id}${n.await ? ` (awaits ${n.await.type})` : ''} on queue ${n.queue}`),
      h('svg:rect', {x: p.x, y: p.y, width: W, height: H, rx: 10}),
      h('svg:circle', {cx: p.x + W - 16, cy: p.y + 18, r: 5, class: 'dot'}),
      h('svg:text', {x: p.x + 14, y: p.y + 22, class: 'node-name'}, n.id.length > 18 ? n.id.slice(0, 17) + '…' : n.id),
      status);
    nodes.set(n.id, {g, status, node: n});
    svg.append(g);
  }

  return {
    el: h('div', {class: 'diagram-wrap', role: 'list', 'aria-label': 'Steps of the flow'}, svg),
    /** show colours each node by the step of that name in a run's state. */
    show(steps) {
      for (const [id, {g, status, node}] of nodes) {
        const st = steps?.[id];
        const s = st?.status || 'none';
        g.setAttribute('class', `node n-${s}${node.type === 'await-step' ? ' await' : ''}`);
        g.setAttribute('data-status', s);
        g.setAttribute('aria-label', `${id}: ${st ? s : 'not run'}`);
        status.textContent = st ? `${s}${st.attempt > 1 ? ` · try ${st.attempt}` : ''}` : (node.entry ? `entry · ${node.queue}` : node.queue);
      }
    },
  };
}

// The flow diagram: the nodes and edges of GET /api/_flows/:name/diagram,
// laid out left to right in layers (a step one layer right of the latest
// step it subscribes to), drawn as SVG that scales to its container.
import {h, duration} from './lib.js';

const W = 156, H = 52, GAP_Y = 30, PAD = 28, LOOP = 26;

/** edgeLabel names an edge; an await's clock glyph becomes a word, which every font has. */
function edgeLabel(e) {
  const label = e.type === 'await' ? `awaits ${e.label.replace(/^\u23f1\s*/u, '')}` : e.label;
  return label + (e.timeout ? ` · ${duration(e.timeout)}` : '');
}

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

/**
 * diagram draws a flow and answers {el, show(steps)}: show colours nodes by
 * step status. Left to right on wide screens; top to bottom on narrow ones,
 * where a row of steps would shrink past reading.
 */
export function diagram(d, vertical = matchMedia('(max-width: 760px)').matches) {
  const layer = layers(d);
  const cols = [];
  for (const n of d.nodes) (cols[layer.get(n.id)] ||= []).push(n);
  const across = Math.max(1, ...cols.map(c => (c ? c.length : 0)));
  const hasLoop = d.edges.some(e => e.type === 'await');
  // Room between layers for the longest edge label, within reason.
  const longest = Math.max(0, ...d.edges.filter(e => e.type === 'emit').map(e => e.label.length));
  const gapX = Math.min(220, Math.max(84, longest * 7 + 28));
  const gapY = vertical ? 64 : GAP_Y;
  const top = PAD + (hasLoop && !vertical ? LOOP + 14 : 0);
  const right = hasLoop && vertical ? LOOP + 40 : 0;
  const pos = new Map();
  let width, height;
  if (vertical) {
    width = PAD * 2 + right + across * W + (across - 1) * 16;
    height = PAD * 2 + cols.length * H + Math.max(0, cols.length - 1) * gapY;
    cols.forEach((col, i) => {
      if (!col) return;
      const offset = ((across - col.length) * (W + 16)) / 2;
      col.forEach((n, j) => pos.set(n.id, {x: PAD + offset + j * (W + 16), y: PAD + i * (H + gapY)}));
    });
  } else {
    width = PAD * 2 + cols.length * W + Math.max(0, cols.length - 1) * gapX;
    height = top + PAD + across * H + (across - 1) * gapY;
    cols.forEach((col, i) => {
      if (!col) return;
      const offset = ((across - col.length) * (H + gapY)) / 2;
      col.forEach((n, j) => pos.set(n.id, {x: PAD + i * (W + gapX), y: top + offset + j * (H + gapY)}));
    });
  }

  const svg = h('svg:svg', {
    class: `diagram${vertical ? ' vertical' : ''}`, viewBox: `0 0 ${width} ${height}`, role: 'none',
    preserveAspectRatio: 'xMidYMin meet',
    style: `max-width:${width}px`,
  });
  svg.append(h('svg:defs', {},
    h('svg:marker', {id: 'arrow', viewBox: '0 0 10 10', refX: '9', refY: '5', markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse'},
      h('svg:path', {d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead'}))));

  for (const e of d.edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    let path, lx, ly, anchor = 'middle';
    if (e.type === 'await' || e.from === e.to) {
      if (vertical) {
        const x = a.x + W, y = a.y + H / 2;
        path = `M${x},${y - 14} C${x + LOOP + 18},${y - 30} ${x + LOOP + 18},${y + 30} ${x},${y + 14}`;
        lx = x + 6; ly = y - 24; anchor = 'start';
      } else {
        const x = a.x + W / 2, y = a.y;
        path = `M${x - 26},${y} C${x - 40},${y - LOOP - 18} ${x + 40},${y - LOOP - 18} ${x + 26},${y}`;
        lx = x; ly = y - LOOP - 10;
      }
    } else if (vertical && b.y > a.y) {
      const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y, my = (y1 + y2) / 2;
      path = `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2 - 2}`;
      lx = (x1 + x2) / 2; ly = my + 4; // on the line, over a halo
    } else if (!vertical && b.x > a.x) {
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
      path = `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 2},${y2}`;
      lx = mx; ly = (y1 + y2) / 2 - 6;
    } else {
      // A back edge (a cycle) goes around the side.
      const x1 = a.x, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, side = Math.min(x1, x2) - 24;
      path = `M${x1},${y1} C${side},${y1} ${side},${y2} ${x2 - 2},${y2}`;
      lx = side; ly = (y1 + y2) / 2; anchor = 'end';
    }
    svg.append(h('svg:g', {class: `edge e-${e.type}`},
      h('svg:path', {d: path, 'marker-end': 'url(#arrow)'}),
      h('svg:text', {x: lx, y: ly, 'text-anchor': anchor, class: 'edge-label'}, edgeLabel(e))));
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
    el: h('div', {class: 'diagram-wrap', role: 'list', 'aria-label': `Diagram of ${d.nodes.length} steps`}, svg),
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

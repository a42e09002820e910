// agentd live trace page: the pictures. A timeline per task (recursions, LLM attempts and
// tool calls as bars on one time axis, from GET /v1/tasks/{id}) and an overview per agent
// (tasks by status per hour, duration percentiles, tokens and cost, from
// GET /v1/agents/{id}/overview). Plain SVG built with the DOM: the page's CSP allows no
// inline script or style, and nothing is loaded from elsewhere.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
const STATUS_ORDER = ['completed', 'failed', 'cancelled', 'rejected', 'waiting', 'running', 'pending'];

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function ms(iso) {
  return iso ? Date.parse(iso) : NaN;
}

/** The timeline's rows: one per recursion, then its LLM attempts and tool calls. */
function timelineRows(detail) {
  const rows = [];
  const llm = detail.llm_calls || [];
  const tools = detail.tool_calls || [];
  for (const recursion of detail.recursions || []) {
    const start = ms(recursion.started_at);
    const end = ms(recursion.finished_at);
    rows.push({ kind: 'recursion', label: `#${recursion.iteration} ${recursion.action_type || 'error'}`,
      start, end, bad: recursion.status === 'error' });
    for (const call of llm.filter((c) => c.trace_id === recursion.trace_id)) {
      const callStart = ms(call.started_at);
      rows.push({ kind: 'llm', label: `LLM ${call.attempt} · ${call.status}`,
        start: callStart, end: callStart + (call.latency_ms || 0), bad: call.status !== '200',
        queued: call.queued_ms || 0 });
    }
    for (const tool of tools.filter((t) => t.trace_id === recursion.trace_id)) {
      rows.push({ kind: 'tool', label: tool.name, start: ms(tool.started_at), end: ms(tool.finished_at),
        bad: tool.success === false });
    }
  }
  return rows.filter((row) => Number.isFinite(row.start) && Number.isFinite(row.end));
}

/** Draws the task's timeline into `container`; false when there is nothing to draw. */
function drawTimeline(container, detail) {
  container.replaceChildren();
  const rows = timelineRows(detail);
  if (rows.length === 0) return false;
  const t0 = Math.min(...rows.map((r) => r.start));
  const t1 = Math.max(...rows.map((r) => r.end), t0 + 1);
  const span = t1 - t0;
  const labelWidth = 150;
  const width = 640;
  const rowHeight = 16;
  const axis = 18;
  const height = rows.length * rowHeight + axis + 4;
  const x = (t) => labelWidth + ((t - t0) / span) * (width - labelWidth - 8);
  const chart = svg('svg', { class: 'chart-timeline', viewBox: `0 0 ${width} ${height}`,
    width: '100%', role: 'img', 'aria-label': 'task timeline' });
  rows.forEach((row, index) => {
    const y = index * rowHeight;
    chart.append(svg('text', { x: row.kind === 'recursion' ? 2 : 12, y: y + 12,
      class: `label kind-${row.kind}` }, row.label));
    const bar = svg('rect', { x: x(row.start), y: y + 3, height: rowHeight - 6,
      width: Math.max(2, x(row.end) - x(row.start)),
      class: `bar bar-${row.kind}${row.bad ? ' bad' : ''}` });
    bar.append(svg('title', {}, `${row.label}: ${Math.round(row.end - row.start)} ms`
      + (row.queued ? ` (after ${row.queued} ms waiting for the rate limit)` : '')));
    chart.append(bar);
  });
  const base = rows.length * rowHeight + 2;
  chart.append(svg('line', { x1: labelWidth, x2: width - 8, y1: base, y2: base, class: 'axis' }));
  for (let i = 0; i <= 4; i += 1) {
    const t = t0 + (span * i) / 4;
    chart.append(svg('text', { x: x(t), y: base + 14, class: 'tick',
      'text-anchor': i === 0 ? 'start' : i === 4 ? 'end' : 'middle' }, `${Math.round(t - t0)} ms`));
  }
  container.append(chart);
  return true;
}

function money(value) {
  return value === null || value === undefined ? 'no price' : `$${Number(value).toFixed(4)}`;
}

/** Draws an agent's overview into `container`: stacked bars per hour and the totals. */
function drawOverview(container, overview) {
  container.replaceChildren();
  if (!overview || overview.tasks === 0) {
    container.append(document.createTextNode('no tasks in the last 24 h'));
    return;
  }
  const width = 240;
  const height = 70;
  const hours = overview.hours || [];
  const since = Date.parse(overview.since);
  const slots = Math.max(1, Math.ceil((Date.now() - since) / 3_600_000));
  const most = Math.max(1, ...hours.map((h) => Object.values(h.by_status).reduce((a, b) => a + b, 0)));
  const slot = width / slots;
  const chart = svg('svg', { class: 'chart-overview', viewBox: `0 0 ${width} ${height + 12}`,
    width: '100%', role: 'img', 'aria-label': 'tasks per hour by status' });
  for (const hour of hours) {
    // Hours on a time axis from `since` to now; the bucket's hour starts at or before since.
    const index = Math.min(slots - 1, Math.max(0, Math.floor((Date.parse(hour.start) - since) / 3_600_000) + 1));
    let y = height;
    for (const status of STATUS_ORDER) {
      const count = hour.by_status[status] || 0;
      if (!count) continue;
      const h = (count / most) * (height - 4);
      y -= h;
      const bar = svg('rect', { x: index * slot + 1, y, width: Math.max(2, slot - 2), height: h,
        class: `bar status-${status}` });
      bar.append(svg('title', {}, `${new Date(hour.start).toLocaleString()}: ${count} ${status}`));
      chart.append(bar);
    }
  }
  chart.append(svg('text', { x: 0, y: height + 11, class: 'tick' }, '24 h ago'));
  chart.append(svg('text', { x: width, y: height + 11, class: 'tick', 'text-anchor': 'end' }, 'now'));
  chart.append(svg('line', { x1: 0, x2: width, y1: height, y2: height, class: 'axis' }));
  container.append(chart);
  const statuses = STATUS_ORDER.filter((s) => overview.by_status[s])
    .map((s) => `${overview.by_status[s]} ${s}`).join(' · ');
  const p50 = overview.duration_ms_p50;
  const p95 = overview.duration_ms_p95;
  const duration = p50 === null || p50 === undefined ? '' :
    `p50 ${(p50 / 1000).toFixed(1)} s · p95 ${(p95 / 1000).toFixed(1)} s`;
  const tokens = overview.prompt_tokens + overview.completion_tokens;
  for (const text of [statuses, duration, `${tokens} tokens · ${money(overview.cost_usd)}`]) {
    if (text) container.append(Object.assign(document.createElement('div'), { className: 'overview-line', textContent: text }));
  }
}

// agentd live trace page: pick an agent, send a request, watch the task run over
// Server-Sent Events, or open any past task and replay its stored events.
'use strict';

const TOKEN_KEY = 'agentd.token';
const AGENT_KEY = 'agentd.agent';
const TERMINAL = ['task.completed', 'task.failed', 'task.cancelled'];
const EVENT_TYPES = [
  'task.started', 'task.resumed', 'recursion.started', 'llm.retry', 'llm.delta',
  'plan.updated', 'step.updated', 'tool.started', 'tool.completed', 'recursion.completed',
  'context.compacted', 'task.waiting', 'input.injected', 'budget.warning', 'budget.exceeded',
  'approval.requested', 'approval.decided', 'task.stalled', 'tool.unknown', 'tool.resolved',
  ...TERMINAL,
];

const $ = (id) => document.getElementById(id);
const state = {
  token: localStorage.getItem(TOKEN_KEY) || '',
  source: null,
  taskId: null,
  lastSeq: 0,
  ended: false,
  cards: new Map(),
  tools: new Map(),
  plan: new Map(),
  historyCursor: null,
};

// ---------- small helpers ----------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function json(value) {
  if (value === undefined || value === null) return '';
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function ago(iso) {
  if (!iso) return '';
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleString();
}

function banner(message, kind) {
  const node = $('banner');
  node.textContent = message || '';
  node.className = kind === 'info' ? 'banner info' : 'banner';
  node.hidden = !message;
}

async function api(path, options = {}) {
  const headers = {};
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  const init = { method: options.method || 'GET', headers };
  if (options.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(options.body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
  if (!response.ok) {
    const error = new Error((data && data.error && data.error.message) || response.statusText);
    error.status = response.status;
    error.code = data && data.error && data.error.code;
    throw error;
  }
  return data;
}

function explain(error) {
  if (error.status === 401) return 'This gateway needs a bearer token: enter it above and press Save.';
  return error.message || String(error);
}

// ---------- agents and history ----------

async function loadAgents() {
  const select = $('agent');
  try {
    const { agents } = await api('v1/agents');
    const wanted = select.value || localStorage.getItem(AGENT_KEY);
    select.replaceChildren(...agents.map((agent) => {
      const option = el('option', null, `${agent.name} · ${agent.model}${agent.version ? ` · v${agent.version}` : ''}`);
      option.value = agent.agent_id;
      return option;
    }));
    if (agents.length === 0) select.append(el('option', null, '(no agents: create one)'));
    if (wanted && agents.some((a) => a.agent_id === wanted)) select.value = wanted;
    banner('');
    await loadHistory(true);
  } catch (error) {
    banner(explain(error));
  }
}

async function loadHistory(reset) {
  const agentId = $('agent').value;
  const list = $('history');
  if (reset) { list.replaceChildren(); state.historyCursor = null; }
  if (!agentId || agentId.length !== 36) return;
  const before = state.historyCursor ? `&before=${state.historyCursor}` : '';
  try {
    const page = await api(`v1/agents/${agentId}/tasks?limit=15${before}`);
    for (const task of page.tasks) list.append(historyItem(task));
    state.historyCursor = page.next_before;
    $('more-history').hidden = !page.next_before;
  } catch (error) {
    banner(explain(error));
  }
  if (reset) { loadOverview(agentId); loadVersions(agentId); }
}

/** The selected agent's versions and the channels serving them (CONTRACT §11). */
async function loadVersions(agentId) {
  const list = $('agent-versions');
  try {
    const { versions, channels } = await api(`v1/agents/${agentId}/versions`);
    if ($('agent').value !== agentId) return;
    list.replaceChildren(...versions.slice().reverse().map((v) => {
      const served = channels.filter((c) => c.version === v.version)
        .map((c) => (c.channel === 'canary' ? `canary ${c.weight} %` : c.channel));
      const text = `v${v.version} · ${v.model}${served.length ? ` · ${served.join(', ')}` : ''}`;
      const item = el('li', served.length ? 'live' : null, text);
      item.title = [v.note, v.instructions].filter(Boolean).join('\n\n');
      return item;
    }));
  } catch (_) { /* the history shows the error already */ }
}

/** The selected agent's last 24 hours, drawn by charts.js. */
async function loadOverview(agentId) {
  try {
    const overview = await api(`v1/agents/${agentId}/overview?hours=24`);
    if ($('agent').value === agentId) drawOverview($('overview'), overview);
  } catch (_) { /* the history shows the error already */ }
}

function historyItem(task) {
  const item = el('li');
  item.dataset.taskId = task.task_id;
  item.title = task.task_id;
  item.append(el('span', `dot ${task.status}`), el('span', 'text', task.input || '(no input)'));
  item.append(el('span', 'when', `${task.status}${task.agent_version ? ` · v${task.agent_version}` : ''} · ${ago(task.created_at)}`));
  item.addEventListener('click', () => openTask(task.task_id));
  if (task.task_id === state.taskId) item.classList.add('current');
  return item;
}

async function createAgent(event) {
  event.preventDefault();
  const tools = $('agent-tools').value.split(',').map((t) => t.trim()).filter(Boolean);
  const body = { name: $('agent-name').value, model: $('agent-model').value };
  if ($('agent-max').value) body.max_iteration = Number($('agent-max').value);
  if (tools.length) body.tools = tools;
  try {
    const agent = await api('v1/agents', { method: 'POST', body });
    localStorage.setItem(AGENT_KEY, agent.agent_id);
    $('agent').value = '';
    $('agent-form').reset();
    $('new-agent').open = false;
    await loadAgents();
  } catch (error) {
    banner(explain(error));
  }
}

// ---------- submitting ----------

async function submitTask(event) {
  event.preventDefault();
  const input = $('input').value;
  const agentId = $('agent').value;
  if (!input.trim() || agentId.length !== 36) {
    banner('Pick an agent and write a request first.');
    return;
  }
  const constraints = $('constraints').value.split(';').map((c) => c.trim()).filter(Boolean);
  const body = { agent_id: agentId, input, stream: $('stream').checked };
  if (constraints.length) body.constraints = constraints;
  $('send').disabled = true;
  try {
    const accepted = await api('v1/tasks', { method: 'POST', body });
    banner('');
    $('input').value = '';
    await openTask(accepted.task_id);
    await loadHistory(true);
  } catch (error) {
    banner(explain(error));
  } finally {
    $('send').disabled = false;
  }
}

async function cancelTask() {
  if (!state.taskId) return;
  try {
    const answer = await api(`v1/tasks/${state.taskId}/cancel`, { method: 'POST' });
    banner(answer.outcome === 'cancelled' ? 'Cancelled before it started.' : 'Cancel sent.', 'info');
  } catch (error) {
    banner(explain(error));
  }
}

// ---------- one task: view state ----------

function resetView(taskId) {
  if (state.source) state.source.close();
  Object.assign(state, { source: null, taskId, lastSeq: 0, ended: false });
  state.cards.clear();
  state.tools.clear();
  state.plan.clear();
  $('empty').hidden = true;
  $('task').hidden = false;
  $('task-id').textContent = taskId;
  $('task-input').textContent = '';
  $('task-meta').textContent = '';
  $('answer-box').hidden = true;
  $('failure').hidden = true;
  $('timeline').replaceChildren();
  $('timeline-chart').replaceChildren();
  $('timeline-box').hidden = true;
  $('plan').replaceChildren(el('li', 'empty', 'no plan yet'));
  setStatus('pending');
  for (const item of $('history').children) {
    item.classList.toggle('current', item.dataset.taskId === taskId);
  }
}

function setStatus(status) {
  const pill = $('task-status');
  pill.textContent = status;
  pill.className = `pill ${status}`;
  $('cancel').hidden = !(status === 'pending' || status === 'running' || status === 'waiting');
}

async function openTask(taskId) {
  resetView(taskId);
  if (location.hash !== `#task=${taskId}`) history.replaceState(null, '', `#task=${taskId}`);
  try {
    const detail = await api(`v1/tasks/${taskId}`);
    showTaskRow(detail.task);
    showChildren(detail.children);
  } catch (error) {
    banner(error.status === 404 ? `No task ${taskId}.` : explain(error));
    return;
  }
  follow(taskId);
}

function showTaskRow(task) {
  $('task-input').textContent = task.input || '';
  // A fork (or a replay) starts with its original's plan and has no plan.updated event
  // of its own until it plans again: the row's plan is shown until an event replaces it.
  if (state.plan.size === 0 && Array.isArray(task.plan) && task.plan.length > 0) {
    renderPlan(task.plan);
  }
  if (!state.ended) setStatus(task.status);
  const parts = [`created ${ago(task.created_at)}`];
  if (task.started_at && task.finished_at) {
    parts.push(`took ${((Date.parse(task.finished_at) - Date.parse(task.started_at)) / 1000).toFixed(1)} s`);
  }
  if (task.iterations) parts.push(`${task.iterations} recursion(s)`);
  const tokens = (task.prompt_tokens || 0) + (task.completion_tokens || 0);
  if (tokens) parts.push(`${tokens} tokens`);
  if (tokens && task.cost_usd !== null && task.cost_usd !== undefined) {
    parts.push(`$${Number(task.cost_usd).toFixed(4)}`);
  }
  if (task.status === 'waiting' && task.wait_reason) parts.push(`waiting: ${task.wait_reason}`);
  if (task.parent_task_id) parts.push(`delegated by ${task.parent_task_id}`);
  if (task.forked_from_task_id) {
    const from = task.forked_from_iteration
      ? `forked from ${task.forked_from_task_id} at recursion ${task.forked_from_iteration}`
      : `replay of ${task.forked_from_task_id}`;
    parts.push(from);
  }
  $('task-meta').textContent = parts.join(' · ');
}

// ---------- the event stream ----------

function follow(taskId) {
  const query = state.token ? `?access_token=${encodeURIComponent(state.token)}` : '';
  const source = new EventSource(`v1/tasks/${taskId}/events${query}`);
  state.source = source;
  const listener = (message) => {
    if (state.source !== source) return;
    let event;
    try { event = JSON.parse(message.data); } catch (_) { return; }
    if (event.seq <= state.lastSeq) return;
    state.lastSeq = event.seq;
    const handler = HANDLERS[event.type];
    if (handler) handler(event, event.data || {});
    if (TERMINAL.includes(event.type)) finish(taskId);
  };
  for (const type of EVENT_TYPES) source.addEventListener(type, listener);
  source.onerror = () => {
    if (state.source !== source) return;
    if (source.readyState === EventSource.CLOSED) {
      source.close();
      if (!state.ended) banner('The event stream closed; reopen the task to resume.');
    }
  };
}

async function finish(taskId) {
  state.ended = true;
  if (state.source) state.source.close();
  state.source = null;
  $('cancel').hidden = true;
  for (const entry of state.tools.values()) {
    if (entry.approval) entry.approval.remove();
    entry.approval = null;
  }
  try {
    const detail = await api(`v1/tasks/${taskId}`);
    if (state.taskId !== taskId) return;
    showTaskRow(detail.task);
    annotateLlmCalls(detail.llm_calls);
    showChildren(detail.children);
    $('timeline-box').hidden = !drawTimeline($('timeline-chart'), detail);
    refreshHistoryItem(detail.task);
    if (detail.task.agent_id === $('agent').value) loadOverview(detail.task.agent_id);
  } catch (_) { /* the trace is already on screen */ }
}

function refreshHistoryItem(task) {
  for (const item of $('history').children) {
    if (item.dataset.taskId === task.task_id) item.replaceWith(historyItem(task));
  }
}

// ---------- recursion cards ----------

function card(iteration) {
  const key = iteration || 0;
  let entry = state.cards.get(key);
  if (entry) return entry;
  const root = el('article', 'card');
  const head = el('div', 'card-head');
  const spinner = el('span', 'spinner');
  const action = el('span', 'badge', '…');
  const right = el('span', 'right');
  head.append(el('span', 'n', `#${key}`), action, spinner, right);
  const body = el('div');
  const tokens = el('pre', 'tokens');
  tokens.hidden = true;
  root.append(head, body, tokens);
  $('timeline').append(root);
  entry = { root, action, spinner, right, body, tokens };
  state.cards.set(key, entry);
  return entry;
}

function field(label, text) {
  const node = el('div', 'field');
  node.append(el('b', null, label), document.createTextNode(text));
  return node;
}

function toolBlock(iteration, data) {
  const key = `${iteration}/${data.tool_call_id}`;
  let entry = state.tools.get(key);
  if (entry) return entry;
  const root = el('div', 'tool');
  const head = el('div', 'tool-head');
  const status = el('span', null, '…');
  const right = el('span', 'right');
  head.append(el('span', 'name', data.name || 'tool'), status, right);
  const args = el('pre', null, `args   ${json(data.arguments)}`);
  const result = el('pre');
  result.hidden = true;
  root.append(head, args, result);
  card(iteration).body.append(root);
  entry = { root, status, right, result, callId: data.tool_call_id };
  state.tools.set(key, entry);
  return entry;
}

/** The tool block of a call, whatever recursion it is in. */
function toolOf(callId) {
  for (const entry of state.tools.values()) if (entry.callId === callId) return entry;
  return null;
}

// ---------- approvals ----------

/** Approve and Reject buttons (with a reason) for a gated call that waits. */
function approvalBox(entry, callId) {
  const box = el('div', 'approval');
  const approve = el('button', 'approve primary', 'Approve');
  const reject = el('button', 'reject danger', 'Reject');
  const reason = el('input', 'reason');
  reason.placeholder = 'reason (for a rejection)';
  approve.type = 'button';
  reject.type = 'button';
  approve.addEventListener('click', () => decide(callId, { decision: 'approve' }, box));
  reject.addEventListener('click', () => {
    const body = { decision: 'reject' };
    if (reason.value.trim()) body.reason = reason.value.trim();
    decide(callId, body, box);
  });
  box.append(approve, reject, reason);
  entry.root.append(box);
  entry.approval = box;
}

async function decide(callId, body, box) {
  const controls = [...box.querySelectorAll('button, input')];
  controls.forEach((control) => { control.disabled = true; });
  try {
    const path = `v1/tasks/${state.taskId}/approvals/${encodeURIComponent(callId)}`;
    await api(path, { method: 'POST', body: { ...body, by: 'page' } });
  } catch (error) {
    banner(explain(error));
    controls.forEach((control) => { control.disabled = false; });
  }
}

// ---------- unknown outcomes (CONTRACT §14) ----------

/** Succeeded / Failed / Retry / Skip buttons (with a reason) for a held call. */
function resolveBox(entry, callId) {
  const box = el('div', 'approval');
  const reason = el('input', 'reason');
  reason.placeholder = 'reason (required)';
  const result = el('input', 'reason');
  result.placeholder = 'result JSON (succeeded) or error (failed)';
  const outcomes = [
    ['succeeded', 'Succeeded', 'approve primary'],
    ['failed', 'Failed', 'reject danger'],
    ['retry', 'Retry', 'approve'],
    ['skip', 'Skip', 'reject'],
  ];
  for (const [outcome, label, cls] of outcomes) {
    const button = el('button', cls, label);
    button.type = 'button';
    button.addEventListener('click', () => {
      if (!reason.value.trim()) { banner('a resolution needs a reason'); return; }
      const body = { outcome, reason: reason.value.trim() };
      const extra = result.value.trim();
      if (extra && outcome === 'succeeded') {
        try { body.result = JSON.parse(extra); } catch (_) { body.result = extra; }
      }
      if (extra && outcome === 'failed') body.error = extra;
      resolveCall(callId, body, box);
    });
    box.append(button);
  }
  box.append(reason, result);
  entry.root.append(box);
  entry.resolve = box;
}

async function resolveCall(callId, body, box) {
  const controls = [...box.querySelectorAll('button, input')];
  controls.forEach((control) => { control.disabled = true; });
  try {
    const path = `v1/tasks/${state.taskId}/tool_calls/${encodeURIComponent(callId)}/resolve`;
    await api(path, { method: 'POST', body: { ...body, by: 'page' } });
  } catch (error) {
    banner(explain(error));
    controls.forEach((control) => { control.disabled = false; });
  }
}

// ---------- plan ----------

function renderPlan(steps) {
  state.plan.clear();
  const list = $('plan');
  list.replaceChildren();
  if (!steps || steps.length === 0) list.append(el('li', 'empty', 'empty plan'));
  for (const step of steps || []) {
    const item = el('li');
    const box = el('span', 'box');
    const desc = el('span', 'desc');
    desc.append(el('span', 'sid', step.step_id), el('span', 'text', step.description || ''));
    item.append(box, desc);
    list.append(item);
    state.plan.set(String(step.step_id), { item, box });
    setStep(step.step_id, step.status);
  }
}

function setStep(stepId, status) {
  const step = state.plan.get(String(stepId));
  if (!step) return;
  step.item.className = status || 'pending';
  step.box.textContent = status === 'done' ? '✓' : status === 'error' ? '✗' : '';
  step.item.title = status || '';
}

// ---------- event handlers ----------

const HANDLERS = {
  'task.started': (event, data) => {
    setStatus('running');
    $('task-meta').textContent = `${data.agent_version ? `version ${data.agent_version} · ` : ''}model ${data.model || '?'} · max ${data.max_iteration || '?'} recursions`;
  },
  'task.resumed': (event, data) => {
    setStatus('running');
    $('timeline').append(el('div', 'note', `resumed after recursion ${data.iteration || 0}`));
  },
  'recursion.started': (event, data) => {
    const entry = card(data.iteration || event.iteration);
    if (data.step_id) entry.right.textContent = `step ${data.step_id}`;
  },
  'llm.retry': (event, data) => {
    card(event.iteration).body.append(el('div', 'note',
      `LLM attempt ${data.attempt} failed (${data.error}); retrying in ${data.delay_ms} ms`));
  },
  'llm.delta': (event, data) => {
    const entry = card(event.iteration);
    entry.tokens.hidden = false;
    entry.tokens.append(document.createTextNode(data.content || ''));
    entry.tokens.scrollTop = entry.tokens.scrollHeight;
  },
  'context.compacted': (event) => {
    card(event.iteration).body.append(el('div', 'note', 'context compacted'));
  },
  'plan.updated': (event, data) => renderPlan(data.plan),
  'step.updated': (event, data) => setStep(data.step_id, data.status),
  'tool.started': (event, data) => { toolBlock(event.iteration, data); },
  'tool.completed': (event, data) => {
    const entry = toolBlock(event.iteration, data);
    if (entry.decided) entry.status.textContent += data.success ? ' · ok' : ' · failed';
    else entry.status.textContent = data.success ? 'ok' : 'failed';
    entry.status.className = data.success ? 'ok' : 'bad';
    entry.right.textContent = data.duration_ms !== undefined ? `${data.duration_ms} ms` : '';
    entry.result.hidden = false;
    entry.result.textContent = data.success ? `result ${json(data.result)}` : `error  ${json(data.error)}`;
  },
  'recursion.completed': (event, data) => {
    const entry = card(data.iteration || event.iteration);
    entry.spinner.remove();
    entry.root.classList.add(data.status === 'error' ? 'error' : 'done');
    entry.action.textContent = data.action_type || 'no action';
    entry.action.className = `badge ${data.action_type || ''}`;
    const step = data.step_id ? `step ${data.step_id} · ` : '';
    entry.right.textContent = `${step}${data.duration_ms !== undefined ? `${data.duration_ms} ms` : ''}`;
    const details = [];
    if (data.abstract) details.push(el('div', 'abstract', data.abstract));
    if (data.observe) details.push(field('observe', data.observe));
    if (data.thought) details.push(field('thought', data.thought));
    entry.body.prepend(...details);
    if (data.error_log) entry.body.append(el('div', 'errlog', data.error_log));
    entry.traceId = event.trace_id;
    showExchange(entry, data.iteration || event.iteration);
  },
  'task.completed': (event, data) => {
    setStatus('completed');
    $('answer').textContent = data.answer || '';
    $('answer-box').hidden = false;
  },
  'task.failed': (event, data) => {
    setStatus(data.reason === 'rejected' ? 'rejected' : 'failed');
    $('failure').textContent = `${data.reason || 'failed'}: ${data.error || ''}`;
    $('failure').hidden = false;
  },
  'task.cancelled': () => setStatus('cancelled'),
  'task.waiting': (event, data) => {
    setStatus('waiting');
    note(event, `waiting: ${data.reason}`);
  },
  'task.resumed': (event, data) => {
    if (!state.ended) setStatus('running');
    note(event, `resumed (${data.reason})`);
  },
  'approval.requested': (event, data) => {
    const entry = toolBlock(event.iteration, data);
    entry.status.textContent = 'awaits approval';
    entry.status.className = 'wait';
    entry.right.textContent = `${data.effect} · expires ${new Date(data.expires_at).toLocaleString()}`;
    if (!entry.approval && !entry.decided) approvalBox(entry, data.tool_call_id);
  },
  'approval.decided': (event, data) => {
    const entry = toolOf(data.tool_call_id);
    if (!entry) return;
    entry.decided = true;
    const by = data.by ? ` by ${data.by}` : '';
    const reason = data.reason ? `: ${data.reason}` : '';
    entry.status.textContent = `${data.decision}${by}`;
    entry.status.className = data.decision === 'approve' || data.decision === 'edit' ? 'ok' : 'bad';
    entry.right.textContent = reason.slice(2);
    if (data.arguments) entry.root.append(el('pre', null, `edited ${json(data.arguments)}`));
    if (entry.approval) entry.approval.remove();
    entry.approval = null;
  },
  'task.stalled': (event, data) => note(event, `stalled: ${data.count} repeats, ${data.action}`),
  'tool.unknown': (event, data) => {
    const entry = toolBlock(event.iteration, data);
    entry.status.textContent = 'outcome unknown';
    entry.status.className = 'wait';
    entry.right.textContent = `key ${data.idempotency_key || '-'}`;
    if (!entry.resolve && !entry.resolved) resolveBox(entry, data.tool_call_id);
  },
  'tool.resolved': (event, data) => {
    const entry = toolOf(data.tool_call_id);
    if (!entry) return;
    entry.resolved = true;
    // A call run again (retry) completes after this: its outcome is added, not shown instead.
    entry.decided = true;
    const by = data.by ? ` by ${data.by}` : '';
    entry.status.textContent = `resolved ${data.outcome}${by}`;
    entry.status.className = data.outcome === 'succeeded' || data.outcome === 'retry' ? 'ok' : 'bad';
    entry.right.textContent = data.reason || '';
    if (entry.resolve) entry.resolve.remove();
    entry.resolve = null;
  },
  'input.injected': (event, data) => note(event, `guidance: ${data.text}`),
  'budget.warning': (event, data) => note(event, `budget: ${data.limit} at ${data.used} of ${data.max}`),
  'budget.exceeded': (event, data) => {
    note(event, `budget ${data.limit} reached (${data.used} of ${data.max}): ${data.action}`);
  },
};

/** A line between the recursion cards: something that happened to the task itself. */
function note(event, text) {
  $('timeline').append(el('div', 'note', text));
}

/** The tasks this one delegated to, as links (the tree, one level at a time). */
function showChildren(children) {
  if (!children || children.length === 0 || $('children')) return;
  const box = el('div', 'note');
  box.id = 'children';
  box.append(document.createTextNode('delegated to: '));
  children.forEach((child, index) => {
    if (index) box.append(document.createTextNode(', '));
    const link = el('a', 'child', `${child.input || child.task_id} (${child.status})`);
    link.href = `#task=${child.task_id}`;
    box.append(link);
  });
  $('timeline').append(box);
}

function annotateLlmCalls(calls) {
  for (const entry of state.cards.values()) {
    const mine = (calls || []).filter((call) => call.trace_id === entry.traceId);
    if (mine.length === 0 || entry.llmShown) continue;
    const text = mine.map((call) => {
      const tokens = call.prompt_tokens !== null && call.completion_tokens !== null
        ? ` · ${call.prompt_tokens}+${call.completion_tokens} tokens` : '';
      const cost = call.cost_usd !== null && call.cost_usd !== undefined
        ? ` · $${Number(call.cost_usd).toFixed(6)}` : '';
      return `LLM attempt ${call.attempt}: ${call.status} · ${call.latency_ms} ms${tokens}${cost}`;
    }).join('\n');
    entry.body.append(el('div', 'llm', text));
    entry.llmShown = true;
  }
}

// What the model was sent and what it replied (CONTRACT §12), per attempt of a recursion,
// from GET /v1/tasks/{id}/llm_calls (empty unless llm.record = full). Read once the
// recursion is committed, which its recursion.completed event says.
async function showExchange(entry, iteration) {
  const taskId = state.taskId;
  if (!iteration || entry.exchangeShown) return;
  entry.exchangeShown = true;
  let list;
  try {
    list = await api(`v1/tasks/${taskId}/llm_calls?iteration=${iteration}`);
  } catch (_) { return; }
  if (state.taskId !== taskId) return;
  for (const call of list.llm_calls || []) {
    if (!call.request && !call.response) continue;
    const box = el('details', 'exchange');
    box.append(el('summary', null,
      `model exchange, attempt ${call.attempt}: ${call.status} · request ${String(call.request_key || '').slice(0, 12)}`));
    const messages = (call.request && call.request.messages) || [];
    for (const message of messages) {
      box.append(el('div', 'exchange-role', `sent · ${message.role}`), el('pre', 'exchange-text', message.content));
    }
    const reply = call.response && call.response.choices && call.response.choices[0]
      ? call.response.choices[0].message : call.response;
    box.append(el('div', 'exchange-role', 'replied'), el('pre', 'exchange-text', reply === undefined || reply === null ? '' : JSON.stringify(reply, null, 2)));
    entry.body.append(box);
  }
}

// ---------- start ----------

function openFromHash() {
  const match = /^#task=([0-9a-fA-F-]{36})$/.exec(location.hash);
  if (match && match[1] !== state.taskId) openTask(match[1]);
}

function start() {
  $('token').value = state.token;
  $('token-form').addEventListener('submit', (event) => {
    event.preventDefault();
    state.token = $('token').value.trim();
    localStorage.setItem(TOKEN_KEY, state.token);
    loadAgents();
    if (state.taskId) openTask(state.taskId);
  });
  $('agent').addEventListener('change', () => {
    localStorage.setItem(AGENT_KEY, $('agent').value);
    loadHistory(true);
  });
  $('reload-agents').addEventListener('click', loadAgents);
  $('reload-history').addEventListener('click', () => loadHistory(true));
  $('more-history').addEventListener('click', () => loadHistory(false));
  $('agent-form').addEventListener('submit', createAgent);
  $('task-form').addEventListener('submit', submitTask);
  $('input').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) $('task-form').requestSubmit();
  });
  $('open-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const id = $('open-id').value.trim();
    if (id) openTask(id);
  });
  $('cancel').addEventListener('click', cancelTask);
  window.addEventListener('hashchange', openFromHash);
  loadAgents();
  openFromHash();
}

start();

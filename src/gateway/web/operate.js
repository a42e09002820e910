// agentd live page, operations views: every agent's tasks (GET /v1/tasks, with a status
// filter and the cursor's "older…") and the schedules (GET /v1/schedules) with their next
// fire, their latest decisions and pause / resume / trigger buttons. Uses app.js's helpers
// (api, el, ago, banner, explain, openTask), loaded before this file.
'use strict';

const operate = { cursor: null, agents: new Map(), load: 0 };

function showView(name) {
  for (const tab of document.querySelectorAll('.view-tab')) {
    tab.classList.toggle('current', tab.dataset.view === name);
  }
  $('view-run').hidden = name !== 'run';
  $('view-tasks').hidden = name !== 'tasks';
  $('view-schedules').hidden = name !== 'schedules';
  if (name === 'tasks') loadAllTasks(true);
  if (name === 'schedules') loadSchedules();
}

async function agentNames() {
  try {
    const { agents } = await api('v1/agents');
    operate.agents = new Map(agents.map((agent) => [agent.agent_id, agent.name]));
  } catch (_) { /* ids are shown instead */ }
}

function agentName(agentId) {
  return operate.agents.get(agentId) || (agentId ? agentId.slice(0, 8) : '');
}

// ---------- all tasks ----------

async function loadAllTasks(reset) {
  const body = $('all-tasks');
  // A newer load (another filter) makes the answers of older ones stale.
  const load = ++operate.load;
  if (reset) { body.replaceChildren(); operate.cursor = null; await agentNames(); }
  const params = new URLSearchParams({ limit: '25' });
  if ($('all-status').value) params.set('status', $('all-status').value);
  if (!reset && operate.cursor) params.set('cursor', operate.cursor);
  try {
    const page = await api(`v1/tasks?${params}`);
    if (load !== operate.load) return;
    for (const task of page.tasks) body.append(taskRow(task));
    operate.cursor = page.next_cursor;
    $('more-tasks').hidden = !page.next_cursor;
    if (reset && page.tasks.length === 0) {
      const empty = el('tr');
      empty.append(el('td', 'muted', 'no tasks'));
      body.append(empty);
    }
    banner('');
  } catch (error) {
    banner(explain(error));
  }
}

function taskRow(task) {
  const row = el('tr');
  row.dataset.taskId = task.task_id;
  row.title = task.task_id;
  const status = el('td');
  status.append(el('span', `pill ${task.status}`, task.status));
  row.append(status, el('td', 'text', task.input || '(no input)'),
    el('td', 'muted', `${agentName(task.agent_id)}${task.agent_version ? ` v${task.agent_version}` : ''}`), el('td', 'muted', ago(task.created_at)),
    el('td', 'muted', task.iterations));
  row.addEventListener('click', () => openFromList(task.task_id));
  return row;
}

function openFromList(taskId) {
  showView('run');
  openTask(taskId);
}

// ---------- schedules ----------

async function loadSchedules() {
  const list = $('schedules');
  try {
    await agentNames();
    const { schedules } = await api('v1/schedules');
    list.replaceChildren(...schedules.map(scheduleCard));
    if (schedules.length === 0) list.append(el('p', 'hint', 'No schedules yet.'));
    banner('');
  } catch (error) {
    banner(explain(error));
  }
}

function timing(schedule) {
  if (schedule.cron) return `cron "${schedule.cron}" ${schedule.timezone}`;
  return `every ${schedule.every_secs} s`;
}

function scheduleCard(schedule) {
  const card = el('div', schedule.paused ? 'schedule paused' : 'schedule');
  card.dataset.scheduleId = schedule.schedule_id;
  const head = el('div', 'schedule-head');
  head.append(el('span', 'name', schedule.name || schedule.schedule_id),
    el('span', 'badge', agentName(schedule.agent_id)),
    el('span', `pill ${schedule.paused ? 'waiting' : 'running'} state`, schedule.paused ? 'paused' : 'active'));
  const buttons = el('span', 'right');
  const toggle = el('button', schedule.paused ? 'resume' : 'pause', schedule.paused ? 'Resume' : 'Pause');
  toggle.type = 'button';
  toggle.addEventListener('click', () => scheduleAction(schedule.schedule_id, toggle,
    { method: 'PATCH', body: { paused: !schedule.paused } }, ''));
  const trigger = el('button', 'trigger', 'Trigger');
  trigger.type = 'button';
  trigger.addEventListener('click', () => scheduleAction(schedule.schedule_id, trigger,
    { method: 'POST' }, '/trigger'));
  buttons.append(toggle, trigger);
  head.append(buttons);
  const next = schedule.next_fire_at ? `next fire ${new Date(schedule.next_fire_at).toLocaleString()}` : 'no next fire';
  const when = el('div', 'when', `${timing(schedule)} · overlap ${schedule.overlap} · catch-up ${schedule.catch_up} · ${next}`);
  when.classList.add('next');
  const input = el('div', 'field', schedule.input);
  const fires = el('div', 'fires');
  for (const fire of schedule.recent_fires) fires.append(fireChip(fire));
  if (schedule.recent_fires.length === 0) fires.append(el('span', 'fire', 'no fires yet'));
  card.append(head, when, input, fires);
  return card;
}

function fireChip(fire) {
  const chip = el('span', `fire ${fire.decision}`, `${fire.decision} · ${ago(fire.fire_at)}`);
  chip.title = `${fire.fire_at}${fire.task_status ? ` · task ${fire.task_status}` : ''}`;
  if (fire.task_id) chip.addEventListener('click', () => openFromList(fire.task_id));
  return chip;
}

async function scheduleAction(scheduleId, button, options, suffix) {
  button.disabled = true;
  try {
    await api(`v1/schedules/${scheduleId}${suffix}`, options);
    await loadSchedules();
  } catch (error) {
    banner(explain(error));
    button.disabled = false;
  }
}

for (const tab of document.querySelectorAll('.view-tab')) {
  tab.addEventListener('click', () => showView(tab.dataset.view));
}
$('all-status').addEventListener('change', () => loadAllTasks(true));
$('reload-tasks').addEventListener('click', () => loadAllTasks(true));
$('more-tasks').addEventListener('click', () => loadAllTasks(false));
$('reload-schedules').addEventListener('click', loadSchedules);
window.addEventListener('hashchange', () => {
  if (location.hash.startsWith('#task=')) showView('run');
});

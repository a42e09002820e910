// Drives the live trace page in headless Chromium: submits a task on the page, approves
// its gated calculator call by clicking Approve, waits for the answer and the checked-off
// plan, saves a screenshot, then reopens the finished task by URL and checks that its full
// trace is replayed (with who approved); forks it from recursion 3 and checks that the fork
// shows the plan it started with; checks the operations views (a schedule with its next
// fire, triggered and paused by clicking; every agent's tasks filtered by status, opened by
// a click); and checks that the empty page has no scrollbar.
//
// Usage: node page.test.mjs URL AGENT_ID MARKER SCREENSHOT_PATH [TOKEN]
// Run by tests/gateway.rs, which starts the gateway, a worker and the scripted fake LLM.
// Chromium: $AGENTD_E2E_CHROMIUM or /usr/bin/chromium.
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { chromium } from 'playwright-core';

const [url, agentId, marker, screenshot, token] = process.argv.slice(2);
if (!url || !agentId || !marker || !screenshot) {
  console.error('usage: node page.test.mjs URL AGENT_ID MARKER SCREENSHOT_PATH [TOKEN]');
  process.exit(2);
}
const executablePath = process.env.AGENTD_E2E_CHROMIUM || '/usr/bin/chromium';
const TIMEOUT = 30_000;

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

// The page fits the window: no scrollbar while nothing overflows (it showed a 2 px one).
async function checkNoScrollbar(page, where) {
  const [scroll, client] = await page.evaluate(
    () => [document.documentElement.scrollHeight, document.documentElement.clientHeight]);
  check(scroll <= client, `${where}: the page is ${scroll - client} px taller than the window`);
}

// A fork starts from its original's plan (no plan.updated event of its own): the page shows
// the plan from the task row.
async function checkFork(context, taskId) {
  const headers = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  const response = await fetch(`${url}v1/tasks/${taskId}/fork`, {
    method: 'POST', headers, body: JSON.stringify({ from_iteration: 3 }),
  });
  check(response.status === 202, `fork answered ${response.status}`);
  const forkId = (await response.json()).task_id;
  const page = await context.newPage();
  await page.goto(`${url}#task=${forkId}`);
  await page.waitForSelector('#answer-box:not([hidden])', { timeout: TIMEOUT });
  // The answer is on screen, so the task row was read: its plan shows by now.
  const steps = await page.locator('#plan li').allTextContents();
  check(steps.length === 2 && steps.join(' ').includes('Compute 6*7'), `fork: plan "${steps}"`);
  await page.close();
}

// The operations views: a schedule made through the API is listed with its next fire;
// Trigger records a `triggered` fire, Pause shows it paused; the list of every agent's
// tasks, filtered to completed ones, shows only those and opens the task on a click.
async function checkOperate(context, taskId) {
  const headers = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  const response = await fetch(`${url}v1/schedules`, {
    method: 'POST', headers,
    body: JSON.stringify({ agent_id: agentId, name: 'page schedule', every: '1h', input: 'scheduled by the page test' }),
  });
  check(response.status === 201, `schedule create answered ${response.status}`);
  const scheduleId = (await response.json()).schedule_id;
  const page = await context.newPage();
  await page.goto(url);
  await page.click('.view-tab[data-view="schedules"]');
  const card = `.schedule[data-schedule-id="${scheduleId}"]`;
  await page.waitForSelector(card, { timeout: TIMEOUT });
  const text = await page.textContent(card);
  check(text.includes('page schedule') && text.includes('every 3600 s') && text.includes('next fire'),
    `schedule card "${text}"`);
  await page.click(`${card} button.trigger`);
  await page.waitForSelector(`${card} .fire.triggered`, { timeout: TIMEOUT });
  await page.click(`${card} button.pause`);
  await page.waitForSelector(`.schedule.paused[data-schedule-id="${scheduleId}"] button.resume`, { timeout: TIMEOUT });
  const paused = await page.textContent(card);
  check(paused.includes('no next fire'), `paused schedule card "${paused}"`);
  await page.click('.view-tab[data-view="tasks"]');
  await page.selectOption('#all-status', 'completed');
  await page.waitForFunction((id) => {
    const pills = [...document.querySelectorAll('#all-tasks .pill')];
    return pills.length > 0 && pills.every((pill) => pill.textContent === 'completed')
      && document.querySelector(`#all-tasks tr[data-task-id="${id}"]`) !== null;
  }, taskId, { timeout: TIMEOUT });
  await page.click(`#all-tasks tr[data-task-id="${taskId}"]`);
  await page.waitForSelector('#answer-box:not([hidden])', { timeout: TIMEOUT });
  check(await page.isHidden('#view-tasks'), 'the task list gave way to the task');
  await page.close();
}

async function submitOnThePage(page) {
  await page.goto(url);
  await checkNoScrollbar(page, 'the empty page');
  if (token) {
    // Without the token the API answers 401 and the page says what to do.
    await page.waitForSelector('#banner:not([hidden])', { timeout: TIMEOUT });
    const hint = await page.textContent('#banner');
    check(hint.includes('bearer token'), `token hint: "${hint}"`);
    await page.fill('#token', token);
    await page.click('#token-form button');
    await page.waitForSelector('#banner', { state: 'hidden', timeout: TIMEOUT });
  }
  await page.waitForFunction(
    (id) => [...document.querySelectorAll('#agent option')].some((o) => o.value === id),
    agentId, { timeout: TIMEOUT });
  await page.selectOption('#agent', agentId);
  await page.fill('#input', `${marker}: what is 6*7?`);
  await page.click('#send');
  // The calculator call waits for a decision: the page shows it with its arguments.
  await page.waitForSelector('.tool .approval button.approve', { timeout: TIMEOUT });
  const waiting = await page.textContent('.tool');
  check(waiting.includes('awaits approval') && waiting.includes('6*7'), `approval request "${waiting}"`);
  const status = (await page.textContent('#task-status')).trim();
  check(status === 'waiting', `status while waiting is "${status}"`);
  await page.click('.tool .approval button.approve');
  await page.waitForSelector('#answer-box:not([hidden])', { timeout: TIMEOUT });
}

async function checkTrace(page, where) {
  const answer = (await page.textContent('#answer')).trim();
  check(answer === '6*7 = 42', `${where}: answer is "${answer}"`);
  const status = (await page.textContent('#task-status')).trim();
  check(status === 'completed', `${where}: status is "${status}"`);
  const steps = await page.locator('#plan li').count();
  const done = await page.locator('#plan li.done').count();
  check(steps === 2 && done === 2, `${where}: ${done} of ${steps} plan steps checked off`);
  const cards = await page.locator('.card').count();
  check(cards === 3, `${where}: ${cards} recursion cards`);
  const actions = await page.locator('.card .badge').allTextContents();
  check(actions.join(',') === 'RE_PLAN,CALL_TOOL,ANSWER', `${where}: actions ${actions}`);
  const tool = await page.textContent('.tool');
  check(tool.includes('calculate') && tool.includes('42'), `${where}: tool call "${tool}"`);
  check(tool.includes('approve by page'), `${where}: who approved, in "${tool}"`);
  const buttons = await page.locator('.tool .approval').count();
  check(buttons === 0, `${where}: ${buttons} approval boxes left after the decision`);
  await page.waitForFunction(() => document.querySelectorAll('.card .llm').length === 3,
    null, { timeout: TIMEOUT });
  // Three LLM calls of 11 + 7 tokens each (the fake LLM's usage).
  await page.waitForFunction(() => document.getElementById('task-meta').textContent.includes('tokens'),
    null, { timeout: TIMEOUT });
  const meta = await page.textContent('#task-meta');
  check(meta.includes('54 tokens'), `${where}: task meta "${meta}"`);
  // The timeline: a bar per recursion, per LLM attempt and per tool call.
  await page.waitForSelector('#timeline-box:not([hidden]) svg.chart-timeline', { timeout: TIMEOUT });
  const bars = async (kind) => page.locator(`svg.chart-timeline rect.bar-${kind}`).count();
  const [recursions, attempts, tools] = [await bars('recursion'), await bars('llm'), await bars('tool')];
  check(recursions === 3 && attempts === 3 && tools === 1,
    `${where}: timeline bars ${recursions} recursions, ${attempts} LLM attempts, ${tools} tool calls`);
  // The agent's overview counts the completed task.
  await page.waitForFunction(() => document.querySelectorAll('#overview rect.status-completed').length > 0,
    null, { timeout: TIMEOUT });
  const overview = await page.textContent('#overview');
  check(/\d+ completed/.test(overview) && overview.includes('54 tokens'), `${where}: overview "${overview}"`);
}

const browser = await chromium.launch({
  executablePath,
  args: ['--no-sandbox', '--headless', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--no-first-run', '--disable-sync'],
});
const problems = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    // The 401s before the token is entered are expected (and checked above).
    if (message.type() === 'error' && !message.text().includes('401')) {
      problems.push(`console error: ${message.text()}`);
    }
  });
  await submitOnThePage(page);
  await checkTrace(page, 'live');
  mkdirSync(dirname(screenshot), { recursive: true });
  await page.screenshot({ path: screenshot, fullPage: true });
  await page.locator('#timeline-box').screenshot({ path: screenshot.replace(/\.png$/, '-timeline.png') });

  const taskId = (await page.textContent('#task-id')).trim();
  const replay = await context.newPage();
  replay.on('pageerror', (error) => problems.push(`page error (replay): ${error.message}`));
  await replay.goto(`${url}#task=${taskId}`);
  await replay.waitForSelector('#answer-box:not([hidden])', { timeout: TIMEOUT });
  await checkTrace(replay, 'replay');
  const listed = await replay.locator(`#history li[data-task-id="${taskId}"]`).count();
  check(listed === 1, 'the task is listed in the agent history');
  await checkFork(context, taskId);
  await checkOperate(context, taskId);
  check(problems.length === 0, problems.join('\n'));
  console.log(`page e2e ok: task ${taskId}, screenshot ${screenshot}`);
} catch (error) {
  console.error(error.stack || String(error));
  if (problems.length) console.error(problems.join('\n'));
  process.exitCode = 1;
} finally {
  await browser.close();
}

// Drives the live trace page in headless Chromium through the four buttons of calls whose
// outcome is unknown (CONTRACT §14): each task is opened by URL while it waits with its
// call held; the page shows the call as "outcome unknown" with Succeeded / Failed / Retry /
// Skip; the test types a reason (and the result or error the button takes), clicks the
// task's button and waits until the page shows the call resolved by the page and the task
// completed. What the click recorded (operator_actions, tool.resolved, the tool's ledger) is
// checked by tests/faces/gateway/page.rs, which starts the gateway, the workers and the
// scripted model.
//
// Usage: node resolve.test.mjs URL TOKEN TASK_ID=OUTCOME...
// Chromium: $AGENTD_E2E_CHROMIUM or /usr/bin/chromium.
import { chromium } from 'playwright-core';

const [url, token, ...pairs] = process.argv.slice(2);
if (!url || !token || pairs.length === 0) {
  console.error('usage: node resolve.test.mjs URL TOKEN TASK_ID=OUTCOME...');
  process.exit(2);
}
const executablePath = process.env.AGENTD_E2E_CHROMIUM || '/usr/bin/chromium';
const TIMEOUT = 30_000;
const LABELS = { succeeded: 'Succeeded', failed: 'Failed', retry: 'Retry', skip: 'Skip' };
// What the second field takes per button (none for retry and skip).
const EXTRA = { succeeded: '{"charged":5,"receipt":"seen-by-page"}', failed: 'declined by the provider' };

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

async function resolveOnThePage(context, taskId, outcome) {
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  await page.goto(`${url}#task=${taskId}`);
  const box = '.tool .approval';
  await page.waitForSelector(`${box} button`, { timeout: TIMEOUT });
  const held = await page.textContent('.tool');
  check(held.includes('outcome unknown') && held.includes(`${taskId}:call_0`),
    `${outcome}: held call shows "${held}"`);
  const labels = await page.locator(`${box} button`).allTextContents();
  check(labels.join(',') === 'Succeeded,Failed,Retry,Skip', `${outcome}: buttons ${labels}`);
  const status = (await page.textContent('#task-status')).trim();
  check(status === 'waiting', `${outcome}: status while held is "${status}"`);
  const fields = page.locator(`${box} input.reason`);
  await fields.nth(0).fill(`${outcome} by the page test`);
  if (EXTRA[outcome]) await fields.nth(1).fill(EXTRA[outcome]);
  await page.locator(`${box} button`, { hasText: LABELS[outcome] }).click();
  await page.waitForSelector(box, { state: 'detached', timeout: TIMEOUT });
  await page.waitForFunction(
    () => document.getElementById('task-status').textContent.trim() === 'completed',
    null, { timeout: TIMEOUT });
  // Once the task has ended (a retry ran the call again) the call still says who resolved it.
  const tools = (await page.locator('.tool').allTextContents()).join(' | ');
  check(tools.includes(`resolved ${outcome} by page`), `${outcome}: resolved call shows "${tools}"`);
  check(problems.length === 0, problems.join('\n'));
  await page.close();
}

const browser = await chromium.launch({
  executablePath,
  args: ['--no-sandbox', '--headless', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--no-first-run', '--disable-sync'],
});
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  // The page keeps its bearer token in localStorage (entering it is page.test.mjs's part).
  await context.addInitScript((value) => localStorage.setItem('agentd.token', value), token);
  for (const pair of pairs) {
    const [taskId, outcome] = pair.split('=');
    check(LABELS[outcome], `unknown outcome ${outcome}`);
    await resolveOnThePage(context, taskId, outcome);
  }
  console.log(`resolve e2e ok: ${pairs.join(' ')}`);
} catch (error) {
  console.error(error.stack || String(error));
  process.exitCode = 1;
} finally {
  await browser.close();
}

// Follow agentd's progress events (CONTRACT §3), deduplicated by (task_id, seq).
//
//   node follow.mjs [TASK_ID] [--timeout 60]
//
// Binds an exclusive queue to the fanout exchange `agentd.events` and prints one line per
// event: `task_id seq type`. Delivery is at least once, so an event may arrive twice (same
// event_id and seq): it is printed once, in seq order. With a TASK_ID, only that task is
// followed and the program exits after its terminal event.
import amqp from 'amqplib';

const url = process.env.AGENTD_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/%2f';
const exchange = process.env.AGENTD_EVENTS_EXCHANGE || 'agentd.events';
const TERMINAL = new Set(['task.completed', 'task.failed', 'task.cancelled']);

const args = process.argv.slice(2);
const at = args.indexOf('--timeout');
const timeout = at < 0 ? 60_000 : Number(args.splice(at, 2)[1]) * 1000;
const [only] = args;

const connection = await amqp.connect(url);
const channel = await connection.createChannel();
const { queue } = await channel.assertQueue('', { exclusive: true });
await channel.bindQueue(queue, exchange, '');
console.error('following');

const lastSeq = new Map(); // task_id -> highest seq printed
const waiting = new Map(); // task_id -> Map(seq -> event) that arrived ahead of a gap
let done;
const finished = new Promise((resolve) => { done = resolve; });

await channel.consume(queue, (message) => {
  if (!message) return;
  const event = JSON.parse(message.content.toString());
  const task = event.task_id;
  if (only && task !== only) return;
  const ahead = waiting.get(task) || new Map();
  waiting.set(task, ahead);
  if (event.seq <= (lastSeq.get(task) || 0) || ahead.has(event.seq)) return; // a duplicate
  ahead.set(event.seq, event);
  for (let next = (lastSeq.get(task) || 0) + 1; ahead.has(next); next += 1) {
    const current = ahead.get(next);
    ahead.delete(next);
    lastSeq.set(task, next);
    console.log(`${task} ${current.seq} ${current.type}`);
    if (only && TERMINAL.has(current.type)) done(0);
  }
  if (ahead.size) console.error(`gap in ${task} after seq ${lastSeq.get(task) || 0}`);
}, { noAck: true });

const code = await Promise.race([
  finished,
  new Promise((resolve) => setTimeout(() => resolve(only ? 2 : 0), timeout)),
]);
await connection.close();
process.exit(code);

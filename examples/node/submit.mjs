// Submit one task to agentd and wait for its outcome on a reply queue (CONTRACT §2, §9).
//
//   node submit.mjs AGENT_ID "What is 6*7?" [--task-id UUID] [--timeout 60]
//
// The task message goes to the default exchange with routing key `agentd.tasks`,
// persistent, as JSON. Its AMQP `reply_to` names an exclusive queue declared here: agentd
// publishes the task's terminal event there with our `correlationId`, once it is committed.
// Exit 0 when the task completed.
import { randomUUID } from 'node:crypto';
import amqp from 'amqplib';

const url = process.env.AGENTD_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/%2f';
const tasksQueue = process.env.AGENTD_TASKS_QUEUE || 'agentd.tasks';

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  if (at < 0) return fallback;
  const [, value] = args.splice(at, 2);
  return value;
};
const taskId = option('--task-id', randomUUID());
const timeout = Number(option('--timeout', '60')) * 1000;
const [agentId, input] = args;
if (!agentId || !input) {
  console.error('usage: node submit.mjs AGENT_ID INPUT [--task-id UUID] [--timeout SECONDS]');
  process.exit(2);
}

const connection = await amqp.connect(url);
const channel = await connection.createConfirmChannel();
// A server-named, exclusive queue: it goes away with this connection.
const { queue: replyQueue } = await channel.assertQueue('', { exclusive: true });
const correlationId = randomUUID();

const outcome = new Promise((resolve) => {
  channel.consume(replyQueue, (message) => {
    if (message && message.properties.correlationId === correlationId) {
      resolve(JSON.parse(message.content.toString()));
    }
  }, { noAck: true });
});

const task = { task_id: taskId, agent_id: agentId, input };
channel.sendToQueue(tasksQueue, Buffer.from(JSON.stringify(task)), {
  contentType: 'application/json',
  persistent: true,
  replyTo: replyQueue,
  correlationId,
});
await channel.waitForConfirms();
console.error(`submitted ${taskId}`);

const timer = new Promise((resolve) => setTimeout(() => resolve(null), timeout));
const event = await Promise.race([outcome, timer]);
await connection.close();
if (!event) {
  console.error(`no outcome within ${timeout / 1000} s`);
  process.exit(2);
}
console.log(JSON.stringify(event));
process.exit(event.type === 'task.completed' ? 0 : 1);

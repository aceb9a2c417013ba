// The user's steps of the permission scenario as a Node user writes them with amqplib (see
// ../permission_parity.py): bind QUEUE to NAME with a.b, publish to NAME with a.b and confirms;
// prints {"bind": outcome, "publish": outcome}, an outcome "ok" or [code, text].
// usage: node permissions.js AMQP_URL NAME QUEUE
const amqp = require('amqplib');

function refusal(err) {
  return [err.code || null, String(err.message).replace(/^.*?: /, '')];
}

// run(channel) on a new confirm channel: "ok", or the broker's refusal that closed it
async function attempt(conn, run) {
  const ch = await conn.createConfirmChannel();
  const closed = new Promise((resolve) => ch.on('error', (err) => resolve(refusal(err))));
  try {
    const result = await Promise.race([run(ch).then(() => 'ok'), closed]);
    if (result !== 'ok') return result;
    await ch.close();
    return 'ok';
  } catch (err) {
    return await closed;
  }
}

async function main() {
  const [url, name, queue] = process.argv.slice(2);
  const conn = await amqp.connect(url);
  conn.on('error', () => {});
  const out = {};
  out.bind = await attempt(conn, (ch) => ch.bindQueue(queue, name, 'a.b'));
  out.publish = await attempt(conn, (ch) => new Promise((resolve, reject) => {
    ch.publish(name, 'a.b', Buffer.from('from the user'), {},
      (err) => (err ? reject(err) : resolve()));
  }));
  await conn.close();
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => { console.error(err); process.exit(1); });

// Publishes one message the way a Node.js application does: amqplib, a publisher-confirm
// channel, Date.now() milliseconds sent as an AMQP timestamp header (and property), a double.
// Usage: node publish.js URI EXCHANGE ROUTING_KEY BODY
const amqp = require('amqplib');

async function main() {
  const [uri, exchange, routingKey, body] = process.argv.slice(2);
  const connection = await amqp.connect(uri);
  const channel = await connection.createConfirmChannel();
  const now = Date.now();
  channel.publish(exchange, routingKey, Buffer.from(body), {
    timestamp: now,
    messageId: 'node-1',
    headers: {
      sent: {'!': 'timestamp', value: now},
      price: {'!': 'double', value: 10.7},
      'x-rtroute-bcc': ['audit.node'],
    },
  });
  await channel.waitForConfirms();
  await connection.close();
  console.log(now);
}

main().catch((err) => { console.error(err); process.exit(1); });

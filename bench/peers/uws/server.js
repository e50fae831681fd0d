// A WebSocket pub/sub server on uWebSockets.js, the raw ceiling for bench/compare --peers uws;
// the wire loadgen --protocol raw speaks (loadgen/src/raw.rs). A subscriber upgrades on /TOPIC
// and is greeted {"subscribed":TOPIC}; the publisher upgrades on /TOPIC?publish, sends rows one
// per line in one message; each row goes to TOPIC as its own message (`frame`: the message whole,
// rows and all), then {"ok":N} goes back. A subscriber 16 MiB behind is closed, never skipped.
//   node server.js [PORT [row|frame]]   (prints "listening on 127.0.0.1:PORT"; PORT 0: any free)
import { App, us_socket_local_port } from 'uws-pack';

const whole = process.argv[3] === 'frame';
const app = App().ws('/*', {
  maxPayloadLength: 16 << 20, maxBackpressure: 16 << 20, closeOnBackpressureLimit: true, idleTimeout: 0,
  upgrade: (res, req, ctx) => res.upgrade({ topic: req.getUrl().slice(1), pub: req.getQuery() === 'publish' },
    req.getHeader('sec-websocket-key'), req.getHeader('sec-websocket-protocol'), req.getHeader('sec-websocket-extensions'), ctx),
  open: (ws) => { const u = ws.getUserData(); if (!u.pub) ws.subscribe(u.topic); ws.send(JSON.stringify(u.pub ? { publisher: u.topic } : { subscribed: u.topic })); },
  message: (ws, msg) => {
    const b = Buffer.from(msg), topic = ws.getUserData().topic;
    let n = 0;
    for (let s = 0, i; s < b.length; s = i + 1, n++) { i = b.indexOf(10, s); if (i < 0) i = b.length; if (!whole) app.publish(topic, b.subarray(s, i)); }
    if (whole) app.publish(topic, b);
    ws.send(`{"ok":${n}}`);
  },
}).listen('127.0.0.1', +(process.argv[2] || 0), (ls) => {
  if (!ls) { console.error('uws: could not listen'); process.exit(1); }
  console.log(`listening on 127.0.0.1:${us_socket_local_port(ls)}${whole ? ' (a message per publish frame)' : ''}`);
});

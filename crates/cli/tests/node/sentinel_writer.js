// A writer that finds the primary through Redis Sentinel (ioredis), as a Node application
// would: it writes distinct keys for a while, each after the previous one's answer, and records
// every write that was acknowledged, with the port of the member that acknowledged it.
//
//     node sentinel_writer.js SENTINEL_PORT MASTER_NAME SECONDS OUT_FILE [SENTINEL_PASSWORD MASTER_PASSWORD]

"use strict";

const fs = require("fs");
const Redis = require("ioredis");

async function main() {
  const [port, name, seconds, out, sentinelPassword, password] = process.argv.slice(2);
  const redis = new Redis({
    sentinels: [{ host: "127.0.0.1", port: Number(port) }],
    name,
    sentinelPassword: sentinelPassword || undefined,
    password: password || undefined,
    // Fail a command after one reconnection instead of queueing it for long: the loop
    // moves on to the next key, as the Python writer does.
    maxRetriesPerRequest: 1,
    connectTimeout: 2000,
    commandTimeout: 2000,
    sentinelRetryStrategy: () => 50,
    retryStrategy: () => 50,
  });
  redis.on("error", () => {});
  const acknowledged = [];
  const errors = [];
  const deadline = Date.now() + Number(seconds) * 1000;
  let number = 0;
  while (Date.now() < deadline) {
    const key = `js:${number}`;
    number += 1;
    try {
      await redis.set(key, key);
      acknowledged.push([key, Date.now() / 1000, redis.stream ? redis.stream.remotePort : 0]);
    } catch (error) {
      errors.push([error.name, String(error.message).slice(0, 120), Date.now() / 1000]);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  fs.writeFileSync(out, JSON.stringify({ acknowledged, errors }));
  redis.disconnect();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

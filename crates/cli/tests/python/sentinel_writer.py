"""A writer that finds the primary through Redis Sentinel (redis-py), as an application would:
it writes distinct keys for a while, retrying after errors (a failover), and records every
write that was acknowledged, with when.

    python3 sentinel_writer.py SENTINEL_PORT MASTER_NAME SECONDS OUT_FILE [SENTINEL_PASSWORD PASSWORD]

Everything else is redis-py's default (RESP3: HELLO 3, with AUTH in it when there is a password;
CLIENT SETINFO).
"""

import json
import sys
import time

import redis
from redis.sentinel import Sentinel


def main():
    port, name, seconds, out = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
    sentinel_password, password = (sys.argv[5:7] + [None, None])[:2]
    sentinel_kwargs = {"socket_timeout": 1.0}
    if sentinel_password:
        sentinel_kwargs["password"] = sentinel_password
    sentinel = Sentinel([("127.0.0.1", port)], sentinel_kwargs=sentinel_kwargs)
    master = sentinel.master_for(name, socket_timeout=2.0, password=password or None)
    acknowledged = []
    errors = []
    deadline = time.time() + seconds
    number = 0
    while time.time() < deadline:
        key = f"py:{number}"
        try:
            master.set(key, key)
            acknowledged.append([key, time.time(), master.connection_pool.get_master_address()[1]])
            number += 1
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as error:
            errors.append([type(error).__name__, str(error)[:120], time.time()])
            # The key's outcome is unknown: write the next one.
            number += 1
            time.sleep(0.02)
    with open(out, "w") as file:
        json.dump({"acknowledged": acknowledged, "errors": errors}, file)


main()

"""A leaseq.client worker process, for the SIGTERM tests (harness_client.run_client_worker):

    python client_worker.py sync|aio URL QUEUE SECONDS CONCURRENCY

Each job's handler sleeps SECONDS (``time.sleep`` in the thread flavour,
``asyncio.sleep`` in the asyncio one).  The worker runs in the main thread,
so SIGTERM stops it; the stats ``run()`` returns are printed as JSON.
"""

import asyncio
import dataclasses
import json
import logging
import sys
import time


def main(flavour: str, url: str, name: str, seconds: float, concurrency: int) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if flavour == "sync":
        from leaseq.client import Queue, Worker

        stats = Worker(Queue(url, name), lambda job: time.sleep(seconds), concurrency=concurrency).run()
    else:
        from leaseq.client import aio

        async def handler(job):
            await asyncio.sleep(seconds)

        async def work():
            async with aio.Queue(url, name) as queue:
                return await aio.Worker(queue, handler, concurrency=concurrency).run()

        stats = asyncio.run(work())
    print(json.dumps(dataclasses.asdict(stats)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))

"""moto's server behind a WSGI server that keeps connections alive.

`moto_server` runs on werkzeug's development server, which closes the
connection after every response. Real DynamoDB keeps connections alive, so
with the stock server every SDK call pays a TCP connect, and benchmarks of
the client measure moto's habit instead. This launcher serves the same moto
application with waitress (HTTP/1.1 keep-alive).

It runs ONE worker thread, on purpose: moto evaluates a conditional write
and applies it without a lock, so two requests on two threads can both pass
the same condition (seen here: 2 winners of 16 racing take-overs). With one
worker, each request is atomic, as DynamoDB's conditional writes are. moto
holds the GIL for nearly all its work, so little throughput is lost.

It also fixes two things in moto's SQS before serving: a bug
(fix_fifo_redelivery_order) and a cost (fast_sqs_clock).

    python tools/moto_server.py -H 127.0.0.1 -p PORT
"""
import argparse
import logging

import waitress
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app


def fix_fifo_redelivery_order() -> None:
    """A FIFO group's messages must come back in order after a failure.

    moto keeps received messages in a "pending" set until they are deleted,
    and blocks a FIFO group while any of its messages is pending. A message
    whose visibility timeout ran out is dropped from that set only when a
    receive reaches it in the queue, and the group check uses the set as it
    was at the start of the receive. So when two messages of a group (B2,
    B3) come back together, the receive skips B2 (B3 still pending), then
    unblocks the group at B3 and delivers B3, B4, ... before B2. Measured
    here (internal/testing/esm's FIFO test). On SQS a message whose
    visibility timeout ran out is no longer in flight, so B2 comes first.

    The fix drops every visible message from the pending set before the
    receive runs, so the group check sees what SQS would.
    """
    from moto.sqs.models import SQSBackend

    receive = SQSBackend.receive_message

    def receive_message(self, queue_name, *args, **kwargs):  # type: ignore[no-untyped-def]
        queue = self.get_queue(queue_name)
        for message in [m for m in queue.pending_messages if m.visible]:
            queue.pending_messages.discard(message)
        return receive(self, queue_name, *args, **kwargs)

    SQSBackend.receive_message = receive_message


def fast_sqs_clock() -> None:
    """moto's SQS reads the clock through a datetime round trip (about 8 us).

    It reads it for every message on every call: whether each message is
    visible, delayed, expired. A SendMessage even computes every queue
    attribute, so with 1,500 messages in flight one send took 44 ms and a
    receive with a visibility change 570 ms (measured; 90,000 clock reads
    for 20 sends), and a soak's backlog during an outage brought the server
    to a crawl. The same wall-clock time, read directly, costs a fraction.
    Only the SQS models are changed, and only when no datetime is passed.
    """
    import time

    from moto.sqs import models

    unix_time, unix_time_millis = models.unix_time, models.unix_time_millis

    def fast_unix_time(dt=None):  # type: ignore[no-untyped-def]
        return time.time() if dt is None else unix_time(dt)

    def fast_unix_time_millis(dt=None):  # type: ignore[no-untyped-def]
        return time.time() * 1000 if dt is None else unix_time_millis(dt)

    models.unix_time, models.unix_time_millis = fast_unix_time, fast_unix_time_millis


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth" notices under load
    fix_fifo_redelivery_order()
    fast_sqs_clock()
    app = DomainDispatcherApplication(create_backend_app)
    waitress.serve(app, host=args.host, port=args.port, threads=args.threads, ident="moto")


if __name__ == "__main__":
    main()

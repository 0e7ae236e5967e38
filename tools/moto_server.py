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
(fix_fifo_redelivery_order) and a cost (fast_sqs_clock); and it lifts
waitress's connection limit (WAITRESS_SETTINGS; tools/moto_server_test.py
shows why).

    python tools/moto_server.py -H 127.0.0.1 -p PORT
"""
import argparse
import logging
import os

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


def trace_sqs(path: str):  # type: ignore[no-untyped-def]
    """Write one JSON line per SQS request and per message it touches to path.

    For finding out why a receive returned fewer messages than a test
    expected: each line has the wall-clock time, and a receive that returns
    fewer than it asked for lists every message of its queue with why it was
    skipped (hidden for how many ms, delayed, in flight in a pending group).
    """
    import json
    import threading
    import time

    from moto.sqs.models import SQSBackend

    lock = threading.Lock()
    out = open(path, "a", buffering=1)

    def log(**kw):  # type: ignore[no-untyped-def]
        kw["t"] = round(time.time(), 6)
        with lock:
            out.write(json.dumps(kw, default=str) + "\n")

    def short(m):  # type: ignore[no-untyped-def]
        return m.id[:8]

    receive, change, delete, send = (
        SQSBackend.receive_message,
        SQSBackend.change_message_visibility,
        SQSBackend.delete_message,
        SQSBackend.send_message,
    )

    def receive_message(self, queue_name, count, wait, visibility, *a, **kw):  # type: ignore[no-untyped-def]
        got = receive(self, queue_name, count, wait, visibility, *a, **kw)
        entry = {"op": "receive", "queue": queue_name, "max": count, "wait": wait, "vis": visibility, "got": [short(m) for m in got]}
        if len(got) < count:
            now = time.time() * 1000
            q = self.get_queue(queue_name)
            entry["skipped"] = [
                {"id": short(m), "hidden_ms": round(m.visible_at - now, 3), "delayed": m.delayed, "pending": m in q.pending_messages, "group": m.group_id, "receives": m.approximate_receive_count}
                for m in q._messages if m.id[:8] not in entry["got"]
            ][:20]
        log(**entry)
        return got

    def change_message_visibility(self, queue_name, receipt_handle, visibility_timeout):  # type: ignore[no-untyped-def]
        q = self.get_queue(queue_name)
        m = next((m for m in q._messages if m.had_receipt_handle(receipt_handle)), None)
        before = m.visible_at if m else None
        try:
            return change(self, queue_name, receipt_handle, visibility_timeout)
        finally:
            log(op="change_visibility", queue=queue_name, id=short(m) if m else None, vis=visibility_timeout,
                current_handle=bool(m and m.receipt_handle == receipt_handle), before=before, after=m.visible_at if m else None)

    def delete_message(self, queue_name, receipt_handle):  # type: ignore[no-untyped-def]
        q = self.get_queue(queue_name)
        m = next((m for m in q._messages if m.had_receipt_handle(receipt_handle)), None)
        log(op="delete", queue=queue_name, id=short(m) if m else None)
        return delete(self, queue_name, receipt_handle)

    def send_message(self, queue_name, *a, **kw):  # type: ignore[no-untyped-def]
        m = send(self, queue_name, *a, **kw)
        log(op="send", queue=queue_name, id=short(m))
        return m

    SQSBackend.receive_message = receive_message
    SQSBackend.change_message_visibility = change_message_visibility
    SQSBackend.delete_message = delete_message
    SQSBackend.send_message = send_message

    def middleware(app):  # type: ignore[no-untyped-def]
        def wrapped(environ, start_response):  # type: ignore[no-untyped-def]
            target = environ.get("HTTP_X_AMZ_TARGET", "")
            if not target.startswith("AmazonSQS."):
                return app(environ, start_response)
            status = []

            def start(s, headers, *a):  # type: ignore[no-untyped-def]
                status.append(s.split(" ", 1)[0])
                return start_response(s, headers, *a)

            t0 = time.time()
            try:
                return app(environ, start)
            finally:
                log(op="http", target=target[len("AmazonSQS."):], peer=environ.get("REMOTE_PORT"), status=status[0] if status else None,
                    start=round(t0, 6), ms=round(1000 * (time.time() - t0), 3))
        return wrapped

    return middleware


# waitress stops accepting connections once it holds connection_limit of
# them (100 by default), and reads a new connection's request only when an
# old one closes. The tests' clients keep idle connections for 90 s (a pool
# per client, per emulated function), so during make test the servers held
# 100 and new connections waited: the DynamoDB server logged the limit 14
# times in one flake hunt. A call its client gave up on meanwhile was read
# and run when accepted, after calls made since on older connections (the
# end-to-end outage test's failure: the function's ChangeMessageVisibility
# of 226 s ran after the test's own visibility change to 0, and hid the
# message again). No limit the tests reach, then; poll, because select()
# cannot watch descriptors past 1024.
WAITRESS_SETTINGS = {"connection_limit": 4000, "asyncore_use_poll": True}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True, help="0: a free port, written to --port-file")
    parser.add_argument("--port-file", help="where to write the port once it is bound")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth" notices under load
    fix_fifo_redelivery_order()
    fast_sqs_clock()
    app = DomainDispatcherApplication(create_backend_app)
    if os.environ.get("MOTO_TRACE_SQS"):
        app = trace_sqs(os.environ["MOTO_TRACE_SQS"])(app)
    # Bound here, then announced: a port picked by another process and bound
    # later can be taken in between (by another server, or as the local
    # port of an outgoing connection), and the server then dies while
    # whatever holds the port answers its health check.
    server = waitress.create_server(app, host=args.host, port=args.port, threads=args.threads, ident="moto", **WAITRESS_SETTINGS)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(server.effective_port))
        os.replace(tmp, args.port_file)
    server.run()


if __name__ == "__main__":
    main()

"""What waitress does at its connection limit, and what moto_server.py does.

Run by make test with the moto venv's Python:

    python -m unittest tools/moto_server_test.py

Each test serves moto's application on a free port in a thread, as
moto_server.py does (one worker thread), and talks SQS's JSON protocol to it
over plain sockets.
"""
import http.client
import json
import logging
import os
import socket
import sys
import threading
import time
import unittest

import waitress
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moto_server  # noqa: E402

# The limit warning the first test provokes, and waitress's queue notices.
logging.getLogger("waitress").setLevel(logging.ERROR)

HEADERS = {
    "Content-Type": "application/x-amz-json-1.0",
    "Authorization": "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=0",
}


def request(action: str, body: dict) -> bytes:
    payload = json.dumps(body).encode()
    head = f"POST / HTTP/1.1\r\nHost: localhost\r\nX-Amz-Target: AmazonSQS.{action}\r\nContent-Length: {len(payload)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items())
    return head.encode() + b"\r\n" + payload


class Server:
    """moto on a free port, one worker thread, with the given waitress settings."""

    def __init__(self, **settings) -> None:  # type: ignore[no-untyped-def]
        app = DomainDispatcherApplication(create_backend_app)
        self.server = waitress.create_server(app, host="127.0.0.1", port=0, threads=1, **settings)
        self.port = self.server.effective_port
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()

    def connect(self) -> http.client.HTTPConnection:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.connect()
        return c

    def call(self, conn: http.client.HTTPConnection, action: str, body: dict) -> dict:
        conn.request("POST", "/", json.dumps(body), {**HEADERS, "X-Amz-Target": f"AmazonSQS.{action}"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise AssertionError(f"{action}: {resp.status} {data!r}")
        return json.loads(data or b"{}")

    def close(self) -> None:
        self.server.close()


class ConnectionLimitTest(unittest.TestCase):
    def scenario(self, server: Server, held: int) -> tuple[bool, list]:
        """Holds `held` open connections, then gives up on a visibility
        change of 300 s sent on a new connection, makes the message visible
        on an old one, frees a connection, and receives. Returns whether the
        new connection was answered, and what the receive got."""
        first = server.connect()
        others = [server.connect() for _ in range(held - 1)]
        for c in others:  # each one accepted and kept alive
            server.call(c, "ListQueues", {})
        url = server.call(first, "CreateQueue", {"QueueName": f"q{time.monotonic_ns()}"})["QueueUrl"]
        server.call(first, "SendMessage", {"QueueUrl": url, "MessageBody": "m"})
        handle = server.call(first, "ReceiveMessage", {"QueueUrl": url, "VisibilityTimeout": 30})["Messages"][0]["ReceiptHandle"]

        late = socket.create_connection(("127.0.0.1", server.port))
        late.sendall(request("ChangeMessageVisibility", {"QueueUrl": url, "ReceiptHandle": handle, "VisibilityTimeout": 300}))
        late.settimeout(2)
        try:
            answered = late.recv(1024).startswith(b"HTTP/1.1 200")
        except socket.timeout:
            answered = False
        late.close()  # the client gives up, as an SDK call at its deadline does

        server.call(first, "ChangeMessageVisibility", {"QueueUrl": url, "ReceiptHandle": handle, "VisibilityTimeout": 0})
        for c in others:
            c.close()  # a slot frees: waitress accepts the waiting connection
        time.sleep(1)
        got = server.call(first, "ReceiveMessage", {"QueueUrl": url, "VisibilityTimeout": 30}).get("Messages", [])
        first.close()
        return answered, got

    def test_at_waitress_limit_a_request_given_up_on_runs_late(self) -> None:
        # waitress's behaviour, at a limit of 3 connections instead of about
        # 98 (its default of 100 counts its listening socket and its
        # trigger): the new connection is not answered, and its request
        # still runs once accepted, after the later change to 0: the
        # message is hidden.
        server = Server(connection_limit=3 + 2)
        try:
            answered, got = self.scenario(server, held=3)
        finally:
            server.close()
        self.assertFalse(answered, "the connection past the limit was answered")
        self.assertEqual(got, [], "the request its client gave up on did not run late; the message was received")

    def test_moto_server_settings_answer_every_connection(self) -> None:
        server = Server(**moto_server.WAITRESS_SETTINGS)
        try:
            answered, got = self.scenario(server, held=150)  # past waitress's default 100
        finally:
            server.close()
        self.assertTrue(answered, "a new connection was not answered with 150 open")
        self.assertEqual(len(got), 1, "the message the test made visible was not received")


if __name__ == "__main__":
    unittest.main()

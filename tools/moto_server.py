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

    python tools/moto_server.py -H 127.0.0.1 -p PORT
"""
import argparse
import logging

import waitress
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth" notices under load
    app = DomainDispatcherApplication(create_backend_app)
    waitress.serve(app, host=args.host, port=args.port, threads=args.threads, ident="moto")


if __name__ == "__main__":
    main()

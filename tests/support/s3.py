"""A loopback S3 server (the fixture `s3`) for the object-storage tests."""

from __future__ import annotations

import logging
import socket

import pytest


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on 127.0.0.1 (a free port) with one bucket; yields its endpoint URL."""
    import boto3
    from moto.server import ThreadedMotoServer  # moto[server], in the dev extra

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one INFO line per S3 request otherwise
    srv = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    srv.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket="fanout-test")
    yield endpoint
    srv.stop()

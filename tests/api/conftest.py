import pytest

from msgstore.client import Client
from tests.support.servers import ServerProcess, free_port


@pytest.fixture
def servers(tmp_path):
    """Factory for real server processes; all are stopped afterwards."""
    started: list[ServerProcess] = []

    def factory(name: str = "node", wait: bool = True, **kw) -> ServerProcess:
        proc = ServerProcess(str(tmp_path / name), name=name, **kw)
        started.append(proc)
        return proc.start(wait=wait)

    yield factory
    for p in started:
        p.kill()


@pytest.fixture
def server(servers):
    return servers("node-0")


@pytest.fixture
def client(server):
    c = Client(server.address, timeout=10)
    yield c
    c.close()


@pytest.fixture
def cluster(tmp_path):
    """Three nodes on 127.0.0.1 that know each other (--peers), named store-0..2."""
    ports = [free_port() for _ in range(3)]
    nodes = []
    for i, port in enumerate(ports):
        peers = ",".join(f"127.0.0.1:{p}" for p in ports if p != port)
        nodes.append(ServerProcess(str(tmp_path / f"store-{i}"), port=port, name=f"store-{i}", args=["--peers", peers]))
    for n in nodes:
        n.start(wait=False)
    for n in nodes:
        n.wait_serving()
    yield nodes
    for n in nodes:
        n.kill()

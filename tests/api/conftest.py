import pytest

from msgstore.client import Client
from tests.support.servers import ServerProcess


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

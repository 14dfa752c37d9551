import pytest
import serve_agents


@pytest.fixture(autouse=True)
def _fresh_gates():
    """Each test's hold gates are its own."""
    serve_agents.reset()
    yield
    serve_agents.reset()

"""MCP tool listings in our terms (issue 20): the arguments check of MCP tools, where
the quick test for common schemas never passes what the full JSON Schema validator
refuses and refused arguments get the validator's message with the JSON path; and a
``$ref`` in an inputSchema, which is never fetched or read."""

from __future__ import annotations

import http.server
import threading

import jsonschema
import pytest
import trio
from edge_servers import call_tool, edge_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_agent.mcp._tools import check_call, validator
from trio_agent.tools import ToolArgumentsError, ToolRegistry

pytest.importorskip("mcp")


TYPES = ["string", "integer", "number", "boolean", "null", "object", "array"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
names = st.sampled_from(["a", "b", "c", "d"])


@st.composite
def schemas(draw):
    properties = draw(
        st.dictionaries(
            names,
            st.fixed_dictionaries({"type": st.sampled_from(TYPES)}, optional={"title": st.text()}),
        )
    )
    schema = {"type": "object", "properties": properties}
    if draw(st.booleans()):
        schema["required"] = draw(st.lists(names, unique=True))
    return schema


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(schemas(), st.dictionaries(names, json_values))
def test_the_quick_check_agrees_with_json_schema(schema, arguments):
    check = validator(schema)
    assert check is not None
    valid = jsonschema.Draft202012Validator(schema).is_valid(arguments)
    pending = check(arguments)  # None: passed by the quick test
    try:
        if pending is not None:
            trio.run(lambda: pending)
    except ToolArgumentsError:
        assert not valid
    else:
        assert valid


async def test_refused_arguments_name_the_json_path():
    check = validator(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        }
    )
    with pytest.raises(ToolArgumentsError, match=r"'x' is not of type 'integer' - at `\$.a`"):
        await check_call({"a": "x", "b": 1}, check)
    with pytest.raises(ToolArgumentsError, match="'b' is a required property"):
        await check_call({"a": 1}, check)
    with pytest.raises(ToolArgumentsError, match=r"True is not of type 'integer'"):
        await check_call({"a": True, "b": 1}, check)
    assert await check_call({"a": 1.0, "b": 2}, check) == {"a": 1.0, "b": 2}  # 1.0 is an integer


def _json_server(hits: list) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/internal/schema.json"


@pytest.mark.filterwarnings(r"ignore:Async generator 'httpx?(core)?2\.:ResourceWarning")
@pytest.mark.filterwarnings("default::DeprecationWarning")  # as in a user's program
async def test_a_remote_ref_in_an_input_schema_is_not_fetched():
    """Issue 20 (review of the MCP servers): a remote ``$ref`` in a tool's inputSchema was fetched,
    by urllib in the event loop, to build the arguments check."""
    hits: list = []
    httpd, url = _json_server(hits)
    try:
        with trio.fail_after(30):
            async with edge_server("ref_server.py", env={"REF_URL": url}) as mcp:
                await call_tool(ToolRegistry(mcp.tools()), "lookup", {"x": "hello"})
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert hits == []  # observed: ['/internal/schema.json'], fetched by urllib in the event loop


@pytest.mark.filterwarnings(r"ignore:Async generator 'httpx?(core)?2\.:ResourceWarning")
@pytest.mark.filterwarnings("default::DeprecationWarning")  # as in a user's program
async def test_a_file_ref_in_an_input_schema_is_not_read(tmp_path):
    """Issue 20 (review of the MCP servers): a ``file:`` ``$ref`` in a tool's inputSchema was read,
    and what it held could reach the model."""
    secret = tmp_path / "secret.json"
    secret.write_text('{"enum": ["AWS_SECRET=abc123"]}')
    with trio.fail_after(30):
        async with edge_server("ref_server.py", env={"REF_URL": secret.as_uri()}) as mcp:
            result = await call_tool(ToolRegistry(mcp.tools()), "lookup", {"x": "hello"})
    assert "AWS_SECRET" not in str(result.content)


@pytest.mark.filterwarnings(r"ignore:Async generator 'httpx?(core)?2\.:ResourceWarning")
async def test_a_dangling_local_ref_leaves_the_arguments_to_the_server():
    """Issue 20 (review of the MCP servers): a dangling local ``$ref`` made every call fail with the
    validator's PointerToNowhere error; the arguments are left to the server to check."""
    with trio.fail_after(30):
        async with edge_server("odd_schema_server.py") as mcp:
            result = await call_tool(ToolRegistry(mcp.tools()), "dangling", {"q": "x"})
    # observed: 'Tool "dangling" raised _WrappedReferencingError: PointerToNowhere: ...'
    assert not result.is_error, result.content

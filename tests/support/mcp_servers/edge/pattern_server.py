"""An MCP server (SDK's MCPServer) whose inputSchemas hold a pattern that
backtracks catastrophically in Python's `re` (`^(a+)+$`: seconds at 26 `a`s and
a `!`, doubling per character), wherever a regex can be: `match` (`pattern`),
`negated` (a `pattern` under `not`), `keyed` (`patternProperties` and
`additionalProperties: false`), `named` (`propertyNames`), `evaluated`
(`unevaluatedProperties` beside `patternProperties`), and `formatted`
(`format: regex`). Each returns its arguments as JSON text."""

import json

from mcp.server.mcpserver import MCPServer

EVIL = "^(a+)+$"
server = MCPServer("pattern")
SCHEMAS = {
    "match": {"x": {"type": "string", "pattern": EVIL}},
    "negated": {"x": {"type": "string", "not": {"pattern": EVIL}}},
    "keyed": {
        "m": {
            "type": "object",
            "patternProperties": {EVIL: {"type": "integer"}},
            "additionalProperties": False,
        }
    },
    "named": {"m": {"type": "object", "propertyNames": {"pattern": EVIL}}},
    "evaluated": {
        "m": {
            "type": "object",
            "patternProperties": {EVIL: {"type": "integer"}},
            "unevaluatedProperties": False,
        }
    },
    "formatted": {"x": {"type": "string", "format": "regex"}},
}


def echo(**arguments: object) -> str:
    return json.dumps(arguments, sort_keys=True)


for name, properties in SCHEMAS.items():
    server.add_tool(lambda x=None, m=None: echo(x=x, m=m), name=name)
    server._tool_manager.get_tool(name).parameters = {"type": "object", "properties": properties}
server.run()

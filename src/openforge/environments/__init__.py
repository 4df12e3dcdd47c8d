"""What runs beside the harness inside a sandbox: a task's services (:mod:`.services`) and the
MCP bridge that offers a task's tools to any harness (:mod:`.mcp_bridge`)."""

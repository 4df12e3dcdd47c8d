"""What runs beside the harness inside a sandbox: a task's services (:mod:`.services`), the
MCP bridge that offers a task's tools to any harness (:mod:`openforge.guest.mcp_bridge`), and
the browser and desktop environments of the GUI setting (:mod:`.browser`, :mod:`.desktop`)."""

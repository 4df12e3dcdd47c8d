"""Model families: how each family's template writes tools, tool calls, tool results and
reasoning, and how its output is parsed back (whole and streamed).

One typed object per family, declared in :mod:`openforge.rendering.families.catalog` (as
``dialects/catalog.py`` declares wire formats); the renderer and the gateway use whichever
one the model directory selects and name none of them. This package's ``__init__`` stays
empty so that the parser modules can import :mod:`openforge.rendering.parsing` without a
cycle: import ``families.catalog`` for the catalog.
"""

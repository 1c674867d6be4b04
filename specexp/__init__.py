"""specexp: experiments on LLM-serving performance, speculative decoding first.

The package is drawn as layer bands, one subpackage each, listed here bottom to top. A
module imports from its own band or those below, never above (tests/unit/test_layers.py
reads this list and the tree, and checks docs/design.md's Layout table against both). The
package root holds the entry points, above every band.
"""

BANDS = ("core", "engines", "host", "serving", "analysis", "output", "tracking", "run", "sweep")

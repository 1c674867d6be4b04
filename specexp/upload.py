"""``python -m specexp.upload ARGS`` is ``specexp upload ARGS``: the command line's main, one code
path and one exit status (docs/cli.md). The command's code is ``specexp.upload_command``; this
module is only the alias, which no module imports."""

import sys

from specexp.cli import alias

if __name__ == "__main__":
    sys.exit(alias("upload"))

"""Run by a stack's interpreter (never imported by specexp): several of an engine's programs,
each as ``python PROGRAM ARGS...`` would run it, one after another in this one interpreter,
so that the engine is imported once for all of them (SGLang's import takes ~9 s of CPU,
vLLM's ~5 s): the doctor's parse and resolution, the tests' command checks. Only for
programs that leave the engine's modules as they found them (not one that tells torch of
another GPU before the engine reads it).

argv[1]: the runs (JSON: [[PROGRAM, *ARGS], ...]). Prints one JSON list, one
{"returncode", "stdout", "stderr"} per run, as its own subprocess would have ended."""

import sys

# Not this folder first on the path: each program's own, as `python PROGRAM` puts it.
del sys.path[0]

import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import traceback  # noqa: E402

ended = []
for program, *args in json.loads(sys.argv[1]):
    stdout, stderr = io.StringIO(), io.StringIO()
    returncode = 0
    sys.argv = [program, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(program)))
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            runpy.run_path(program, run_name="__main__")
        except SystemExit as exit_:
            # As the interpreter ends: an int is the status, anything else is printed.
            if exit_.code is None or isinstance(exit_.code, int):
                returncode = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
                returncode = 1
        except BaseException:
            traceback.print_exc()
            returncode = 1
    del sys.path[0]
    ended.append(
        {"returncode": returncode, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}
    )
sys.argv = [__file__]
print(json.dumps(ended))

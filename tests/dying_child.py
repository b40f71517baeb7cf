"""The start of a child process's script that kills itself with SIGKILL right after its K-th
file-system change (a rename, replace or unlink: a store's atomic steps), or runs to the end: a
kill at every instant between those steps. The script reads K from ``sys.argv[1]``, counts in
``count[0]`` and goes on with what the caller appends (which may print ``count[0]``)."""

import textwrap

KILL_AFTER_STEP = textwrap.dedent(
    """
    import os, shutil, signal, sys
    kill_at = int(sys.argv[1])
    count = [0]

    def dying(fn):
        def call(*args, **kwargs):
            out = fn(*args, **kwargs)
            count[0] += 1
            if count[0] >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        return call

    os.rename, os.replace, os.unlink = dying(os.rename), dying(os.replace), dying(os.unlink)
    shutil.rmtree = dying(shutil.rmtree)
    """
)

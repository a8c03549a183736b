"""Run as each Python that the test suite starts comes up (``conftest.py`` puts this folder on
their ``PYTHONPATH``): where the suite's warm interpreter is named, gradverify's own processes
are forked from it (``warm_client.py``). Test-only, like everything in this folder."""
import os

if os.environ.get("GRADVERIFY_TESTS_WARM"):
    try:
        import warm_client
    except ImportError:  # another gradverify, without what the client installs over
        pass
    else:
        warm_client.install()

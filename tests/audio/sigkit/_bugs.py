import os

PLANTED = os.environ.get("SIGKIT_BUGS") == "1"

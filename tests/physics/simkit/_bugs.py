import os

PLANTED = os.environ.get("SIMKIT_BUGS") == "1"
